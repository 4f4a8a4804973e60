//! Who may use the MCP endpoint (`--auth`): `open` trusts the identity headers of whatever is
//! in front (development only, loudly logged), `keys` wants one of the edge's API keys, and
//! `oauth` makes `/mcp` an OAuth 2.1 protected resource per the MCP authorization spec
//! (`oauth`), API keys accepted too when a key table is named.
//!
//! With a credential, the caller's identity comes from it alone: the client's own identity
//! headers are dropped and replaced by the credential's tenant, user, role and groups (so the
//! identity layer and the policies read them as before), its scopes travel in the request's
//! extensions, and the `Authorization` header is removed before anything else sees the
//! request: a token never reaches a downstream server.

pub mod config;
pub mod oauth;

use std::sync::Arc;

use anyhow::Context;
use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::json;
use switchyard_auth::{KEY_PREFIX, KeyError, KeyStore};
use switchyard_kit::identity::{ADMIN_HEADER, TENANT_HEADER, USER_HEADER};

pub use config::{AuthArgs, AuthMode};
pub use oauth::{TokenError, TokenVerifier};

use crate::policy::{GROUPS_HEADER, ROLE_HEADER, Subject};

/// The scopes of the credential a request carried (none for an API key), for the policies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantedScopes(pub Vec<String>);

/// The credentials the MCP endpoint accepts.
#[derive(Debug)]
pub struct Authenticator {
    mode: AuthMode,
    keys: Option<Arc<KeyStore>>,
    tokens: Option<TokenVerifier>,
}

/// Why a request is refused, as the endpoint answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential (401, no `error`: RFC 6750 section 3.1).
    Missing,
    /// A credential that does not check out (401 `invalid_token`).
    Invalid(String),
    /// A valid token without the endpoint's scopes (403 `insufficient_scope`).
    InsufficientScope { missing: Vec<String> },
    /// The key table cannot be read (503).
    Unavailable(String),
}

impl Authenticator {
    /// Open: every request passes with the identity headers it carries.
    pub fn open() -> Self {
        Self { mode: AuthMode::Open, keys: None, tokens: None }
    }

    pub fn new(mode: AuthMode, keys: Option<Arc<KeyStore>>, tokens: Option<TokenVerifier>) -> Self {
        Self { mode, keys, tokens }
    }

    /// From the flags: the key table opened (DATABASE_URL), the issuer's keys loaded.
    pub async fn from_config(config: &crate::GatewayConfig, policy_scopes: &[String]) -> anyhow::Result<Self> {
        let args = &config.auth;
        args.validate().map_err(anyhow::Error::msg)?;
        let keys = match args.key_schema() {
            None => None,
            Some(schema) => {
                let url = config.stores.store_args().database_url.clone().with_context(|| {
                    format!("--auth {:?} with API keys needs DATABASE_URL (the edge's key table)", args.mode)
                })?;
                let store = KeyStore::connect(url.expose(), schema, args.key_cache_ttl)
                    .await
                    .with_context(|| format!("opening the API key table in schema `{schema}`"))?;
                Some(Arc::new(store))
            }
        };
        let tokens = match args.mode {
            AuthMode::Oauth => Some(TokenVerifier::new(args, policy_scopes).await?),
            _ => None,
        };
        let auth = Self::new(args.mode, keys, tokens);
        auth.announce();
        Ok(auth)
    }

    fn announce(&self) {
        match (&self.mode, &self.tokens) {
            (AuthMode::Open, _) => tracing::warn!(
                "MCP ENDPOINT IS UNAUTHENTICATED (--auth open): anyone who reaches it may call every tool, and the \
                 x-tenant-id/x-user-id/x-switchyard-role/x-switchyard-groups headers are trusted as sent; use \
                 --auth oauth or --auth keys outside development"
            ),
            (AuthMode::Keys, _) => tracing::info!("MCP endpoint: API keys required (--auth keys)"),
            (AuthMode::Oauth, Some(tokens)) => tracing::info!(
                metadata = tokens.metadata_url(),
                api_keys = self.keys.is_some(),
                "MCP endpoint: OAuth bearer tokens required (--auth oauth)"
            ),
            (AuthMode::Oauth, None) => {}
        }
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    pub fn tokens(&self) -> Option<&TokenVerifier> {
        self.tokens.as_ref()
    }

    /// The caller a request's credential stands for; None in open mode.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Subject>, Refusal> {
        if self.mode == AuthMode::Open {
            return Ok(None);
        }
        let credential = credential(headers)?.ok_or(Refusal::Missing)?;
        if credential.starts_with(KEY_PREFIX)
            && let Some(keys) = &self.keys
        {
            let holder = keys.verify(credential).await.map_err(|err| match err {
                KeyError::Invalid => Refusal::Invalid(err.to_string()),
                KeyError::Unavailable | KeyError::Malformed => Refusal::Unavailable(err.to_string()),
            })?;
            return Ok(Some(Subject { tenant: holder.tenant, user: holder.user, ..Subject::default() }));
        }
        match &self.tokens {
            Some(tokens) => tokens.verify(credential).await.map(Some).map_err(|err| match err {
                TokenError::Invalid(why) => Refusal::Invalid(why),
                TokenError::InsufficientScope { missing } => Refusal::InsufficientScope { missing },
            }),
            None => Err(Refusal::Invalid("not an API key".into())),
        }
    }

    /// The answer to a refused request: the status, and `WWW-Authenticate` pointing at the
    /// protected resource metadata (RFC 9728 section 5.1).
    pub fn refuse(&self, refusal: &Refusal) -> Response {
        let mut challenge = String::from("Bearer");
        let mut params: Vec<String> = Vec::new();
        let (status, error, description) = match refusal {
            Refusal::Missing => (StatusCode::UNAUTHORIZED, None, "a bearer credential is required".to_owned()),
            Refusal::Invalid(why) => (StatusCode::UNAUTHORIZED, Some("invalid_token"), why.clone()),
            Refusal::InsufficientScope { missing } => (
                StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                format!("the token lacks the scope(s) {}", missing.join(" ")),
            ),
            Refusal::Unavailable(why) => {
                let body = json!({"error": "temporarily_unavailable", "error_description": why});
                return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], axum::Json(body))
                    .into_response();
            }
        };
        if let Some(error) = error {
            params.push(format!("error=\"{error}\""));
            params.push(format!("error_description=\"{}\"", quoted(&description)));
        }
        if let Some(tokens) = &self.tokens {
            let scopes = match refusal {
                Refusal::InsufficientScope { .. } | Refusal::Missing => tokens.required_scopes().join(" "),
                _ => String::new(),
            };
            if !scopes.is_empty() {
                params.push(format!("scope=\"{}\"", quoted(&scopes)));
            }
            params.push(format!("resource_metadata=\"{}\"", tokens.metadata_url()));
        }
        if !params.is_empty() {
            challenge.push(' ');
            challenge.push_str(&params.join(", "));
        }
        let body = json!({"error": error.unwrap_or("unauthorized"), "error_description": description});
        let mut response = (status, axum::Json(body)).into_response();
        if let Ok(value) = HeaderValue::try_from(challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The presented credential: `Authorization: Bearer …`, or `x-api-key` (the edge takes both).
fn credential(headers: &HeaderMap) -> Result<Option<&str>, Refusal> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().map_err(|_| Refusal::Invalid("authorization: not valid text".into()))?;
        let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
        if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(Refusal::Invalid("authorization: expected `Bearer <token>`".into()));
        }
        return Ok(Some(token.trim()));
    }
    match headers.get("x-api-key") {
        Some(value) => {
            let text = value.to_str().map_err(|_| Refusal::Invalid("x-api-key: not valid text".into()))?;
            Ok(Some(text.trim()).filter(|t| !t.is_empty()))
        }
        None => Ok(None),
    }
}

/// Text inside a quoted-string of an auth-param: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars().filter(|c| !matches!(c, '"' | '\\') && !c.is_control()).collect()
}

/// The headers that say who a request is for: only a credential may set them here.
const IDENTITY_HEADERS: [&str; 5] = [TENANT_HEADER, USER_HEADER, ADMIN_HEADER, ROLE_HEADER, GROUPS_HEADER];

/// Middleware in front of `/mcp`: checks the credential, then rewrites the request so
/// everything behind sees the credential's caller and never the credential.
pub async fn check(State(auth): State<Arc<Authenticator>>, mut request: Request, next: Next) -> Response {
    let subject = match auth.authenticate(request.headers()).await {
        Ok(None) => return next.run(request).await,
        Ok(Some(subject)) => subject,
        Err(refusal) => {
            if let Refusal::Unavailable(why) = &refusal {
                tracing::warn!(error = %why, "mcp request refused: credentials cannot be checked");
            }
            return auth.refuse(&refusal);
        }
    };
    let headers = request.headers_mut();
    for name in IDENTITY_HEADERS.iter().chain([&header::AUTHORIZATION.as_str(), &"x-api-key"]) {
        headers.remove(*name);
    }
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set(TENANT_HEADER, subject.tenant.as_str());
    if let Some(user) = &subject.user {
        set(USER_HEADER, user.as_str());
    }
    if let Some(role) = &subject.role {
        set(ROLE_HEADER, role.as_str());
    }
    if !subject.groups.is_empty() {
        set(GROUPS_HEADER, &subject.groups.join(","));
    }
    request.extensions_mut().insert(GrantedScopes(subject.scopes));
    next.run(request).await
}

/// `GET /.well-known/oauth-protected-resource[/…]`: the protected resource metadata.
pub async fn metadata(State(auth): State<Arc<Authenticator>>) -> Response {
    match auth.tokens() {
        Some(tokens) => {
            ([(header::CACHE_CONTROL, "public, max-age=300")], axum::Json(tokens.metadata().clone())).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closed_modes_want_a_well_formed_credential() {
        let keys_only = Authenticator::new(AuthMode::Keys, None, None);
        assert_eq!(keys_only.authenticate(&HeaderMap::new()).await, Err(Refusal::Missing));
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert!(matches!(keys_only.authenticate(&headers).await, Err(Refusal::Invalid(_))));
        let open = Authenticator::open();
        assert_eq!(open.authenticate(&headers).await, Ok(None));
    }

    #[test]
    fn refusals_carry_the_challenge() {
        let auth = Authenticator::new(AuthMode::Keys, None, None);
        let response = auth.refuse(&Refusal::Invalid("bad \"key\"".into()));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().to_owned();
        assert_eq!(challenge, "Bearer error=\"invalid_token\", error_description=\"bad key\"");
        assert_eq!(auth.refuse(&Refusal::Missing).headers()[header::WWW_AUTHENTICATE], "Bearer");
    }
}
