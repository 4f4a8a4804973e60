//! A minimal OAuth 2.1 authorization server for tests of protected resources: RFC 8414
//! metadata, a JWKS, and a token endpoint issuing RS256 JWTs for the `client_credentials`
//! grant (client_secret_basic or _post; the `resource` parameter of RFC 8707 becomes `aud`).
//! Tests also mint tokens directly (any claims, or signed with a key the JWKS does not hold)
//! and see the token requests it served.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::{RsaPrivateKey, pkcs1::EncodeRsaPrivateKey, traits::PublicKeyParts};
use serde_json::{Map, Value, json};

use crate::served::Served;

/// An RSA signing key and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    encoding: EncodingKey,
    pub jwk: Value,
}

impl SigningKey {
    /// A fresh 2048-bit RSA key.
    pub fn generate(kid: &str) -> Self {
        let private = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("an RSA key");
        let der = private.to_pkcs1_der().expect("PKCS#1 DER");
        let jwk = json!({
            "kty": "RSA",
            "kid": kid,
            "use": "sig",
            "alg": "RS256",
            "n": URL_SAFE_NO_PAD.encode(private.n().to_bytes_be()),
            "e": URL_SAFE_NO_PAD.encode(private.e().to_bytes_be()),
        });
        Self { kid: kid.to_owned(), encoding: EncodingKey::from_rsa_der(der.as_bytes()), jwk }
    }

    /// An RS256 JWT of `claims`, naming this key's `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a signed token")
    }

    /// The JWKS document holding this key.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.jwk]})
    }
}

/// A registered client and what its tokens carry.
#[derive(Debug, Clone)]
pub struct Client {
    pub secret: String,
    /// Space-separated scopes granted when the client asks for none; a request for scopes
    /// gets those it asked for that are listed here.
    pub scope: String,
    /// Extra claims (tenant, groups, role…) of its tokens.
    pub claims: Map<String, Value>,
}

struct Shared {
    issuer: String,
    key: SigningKey,
    clients: HashMap<String, Client>,
    /// `resource` of each token request served, in order (None when absent).
    resources: Mutex<Vec<Option<String>>>,
}

/// The server, serving on its own task until dropped.
pub struct AuthorizationServer {
    served: Served,
    state: Arc<Shared>,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl AuthorizationServer {
    /// Starts on a loopback port with `clients` by id; the issuer is `http://127.0.0.1:<port>`.
    pub async fn start(clients: HashMap<String, Client>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let key =
            tokio::task::spawn_blocking(|| SigningKey::generate("test-key-1")).await.map_err(std::io::Error::other)?;
        let state =
            Arc::new(Shared { issuer: format!("http://{addr}"), key, clients, resources: Mutex::new(Vec::new()) });
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(jwks))
            .route("/token", post(token))
            .with_state(state.clone());
        let served = Served::spawn(addr, move |shutdown| async move {
            axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
            Ok(())
        });
        Ok(Self { served, state })
    }

    pub fn issuer(&self) -> &str {
        &self.state.issuer
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.served.url())
    }

    /// The JWKS it serves.
    pub fn jwks(&self) -> Value {
        self.state.key.jwks()
    }

    /// A token signed with its key: `claims` as given (tests add or leave out what they test).
    pub fn mint(&self, claims: &Value) -> String {
        self.state.key.sign(claims)
    }

    /// The usual claims of a token for `audience`: this issuer, a subject, five minutes.
    pub fn claims(&self, audience: &str, scope: &str) -> Value {
        json!({"iss": self.issuer(), "aud": audience, "sub": "ann", "scope": scope, "iat": now(), "exp": now() + 300})
    }

    /// The `resource` parameter of every token request served so far.
    pub fn token_resources(&self) -> Vec<Option<String>> {
        self.state.resources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub async fn stop(self) {
        self.served.stop().await;
    }
}

async fn metadata(State(state): State<Arc<Shared>>) -> Json<Value> {
    let issuer = &state.issuer;
    Json(json!({
        "issuer": issuer,
        // RFC 8414 names it even for a server that only grants client credentials, and the MCP
        // Python SDK refuses metadata without it; nothing here serves it.
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    }))
}

async fn jwks(State(state): State<Arc<Shared>>) -> Json<Value> {
    Json(state.key.jwks())
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (status, Json(json!({"error": error, "error_description": description}))).into_response()
}

async fn token(State(state): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let form = parse_form(&body);
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    // client_secret_basic, else client_secret_post.
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|pair| pair.split_once(':').map(|(id, secret)| (percent_decode(id), percent_decode(secret))));
    let Some((client_id, secret)) = basic.or_else(|| Some((field("client_id")?, field("client_secret")?))) else {
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "no client credentials");
    };
    let Some(client) = state.clients.get(&client_id).filter(|c| c.secret == secret) else {
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client or wrong secret");
    };
    if field("grant_type").as_deref() != Some("client_credentials") {
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "client_credentials only");
    }
    let resource = field("resource");
    state.resources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(resource.clone());
    let asked = field("scope");
    let granted: Vec<&str> = match &asked {
        Some(asked) => asked.split(' ').filter(|s| client.scope.split(' ').any(|g| g == *s)).collect(),
        None => client.scope.split(' ').collect(),
    };
    let scope = granted.join(" ");
    let mut claims = client.claims.clone();
    claims.insert("iss".into(), json!(state.issuer));
    claims.insert("sub".into(), json!(client_id));
    claims.insert("aud".into(), json!(resource.unwrap_or_else(|| state.issuer.clone())));
    claims.insert("scope".into(), json!(scope));
    claims.insert("client_id".into(), json!(client_id));
    claims.insert("iat".into(), json!(now()));
    claims.insert("exp".into(), json!(now() + 300));
    let token = state.key.sign(&Value::Object(claims));
    Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 300, "scope": scope})).into_response()
}

/// `application/x-www-form-urlencoded` pairs.
fn parse_form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
