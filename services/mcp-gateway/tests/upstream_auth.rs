//! Downstream servers' own credentials, configured per server in the servers file: a header read
//! from a secret file (and read again when the server refuses it after a rotation), a bearer
//! token the gateway gets from a real token endpoint with the client-credentials grant (cached,
//! refreshed before it expires, fetched again once on a `401`, a wrong secret told on the call),
//! a stdio server's environment from secrets, and what never leaves the gateway: a client's own
//! `Authorization` header, one server's credentials sent to another, a secret in `Debug` output
//! or in what `ListServers` reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use base64::Engine;
use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::{Value, json};
use switchyard_mcp_gateway::{Stores, upstream::config::parse_contents};
use switchyard_testkit::{
    eventually,
    mcp::{self, FixtureServer, Guard},
    peer_tool,
};

const CLIENT_ID: &str = "switchyard-gateway";

/// A token endpoint (RFC 6749 §4.4) for one client: HTTP Basic or form-body client
/// authentication, tokens with a short life, and a way to revoke them all.
#[derive(Clone)]
struct TokenEndpoint {
    state: Arc<TokenState>,
    addr: SocketAddr,
}

struct TokenState {
    secret: Mutex<String>,
    lifetime: Duration,
    /// Issued tokens and when each expires.
    issued: Mutex<HashMap<String, Instant>>,
    fetches: AtomicUsize,
    refusals: AtomicUsize,
    /// The form of every request, for checking what was sent.
    forms: Mutex<Vec<HashMap<String, String>>>,
}

impl TokenEndpoint {
    async fn start(secret: &str, lifetime: Duration) -> Self {
        let state = Arc::new(TokenState {
            secret: Mutex::new(secret.to_owned()),
            lifetime,
            issued: Mutex::default(),
            fetches: AtomicUsize::new(0),
            refusals: AtomicUsize::new(0),
            forms: Mutex::default(),
        });
        let router = axum::Router::new().route("/token", axum::routing::post(issue)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(common::loopback()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { state, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    fn refusals(&self) -> usize {
        self.state.refusals.load(Ordering::SeqCst)
    }

    /// Whether `authorization` carries a token this endpoint issued that has not expired.
    fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|value| value.strip_prefix("Bearer ")) else { return false };
        self.state.issued.lock().unwrap().get(token).is_some_and(|expiry| Instant::now() < *expiry)
    }

    fn revoke_all(&self) {
        self.state.issued.lock().unwrap().clear();
    }

    fn set_secret(&self, secret: &str) {
        *self.state.secret.lock().unwrap() = secret.to_owned();
    }

    fn forms(&self) -> Vec<HashMap<String, String>> {
        self.state.forms.lock().unwrap().clone()
    }

    /// A guard for a fixture server that accepts this endpoint's live tokens only.
    fn guard(&self) -> Guard {
        let endpoint = self.clone();
        Arc::new(move |headers: &HeaderMap| {
            endpoint.accepts(headers.get("authorization").and_then(|value| value.to_str().ok()))
        })
    }
}

fn form_decode(text: &str) -> String {
    let text = text.replace('+', " ");
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|hex| u8::from_str_radix(hex, 16).ok()))
            .flatten();
        if let Some(byte) = escaped {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

async fn issue(State(state): State<Arc<TokenState>>, headers: HeaderMap, body: String) -> Response {
    state.fetches.fetch_add(1, Ordering::SeqCst);
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(content_type.starts_with("application/x-www-form-urlencoded"), "content type {content_type}");
    let form: HashMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (form_decode(key), form_decode(value)))
        .collect();
    state.forms.lock().unwrap().push(form.clone());
    let basic = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|pair| pair.split_once(':').map(|(id, secret)| (form_decode(id), form_decode(secret))));
    let (id, secret) = match basic {
        Some(pair) => pair,
        None => {
            (form.get("client_id").cloned().unwrap_or_default(), form.get("client_secret").cloned().unwrap_or_default())
        }
    };
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return json_answer(StatusCode::BAD_REQUEST, &json!({"error": "unsupported_grant_type"}));
    }
    if id != CLIENT_ID || secret != *state.secret.lock().unwrap() {
        state.refusals.fetch_add(1, Ordering::SeqCst);
        let error = json!({"error": "invalid_client", "error_description": "client authentication failed"});
        return json_answer(StatusCode::UNAUTHORIZED, &error);
    }
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    state.issued.lock().unwrap().insert(token.clone(), Instant::now() + state.lifetime);
    let answer = json!({"access_token": token, "token_type": "Bearer", "expires_in": state.lifetime.as_secs()});
    json_answer(StatusCode::OK, &answer)
}

/// A JSON answer (by hand: the gateway's axum is built without its `json` feature).
fn json_answer(status: StatusCode, body: &Value) -> Response {
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn tools() -> Vec<rmcp::model::Tool> {
    vec![mcp::tool("lookup", "Looks a record up by its key", &["key"])]
}

async fn call(client: &mcp::Client, name: &str, key: &str) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = json!({"key": key}).as_object().cloned();
    client.call_tool(params).await.map_err(|err| err.to_string())
}

fn text_of(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

/// An MCP client of the gateway that sends its own bearer token, which must stay with the gateway.
async fn client_with_token(url: &str, token: &str) -> mcp::Client {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("switchyard-test", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oauth_tokens_are_fetched_refreshed_and_sent_to_their_server_only() {
    let folder = tempfile::tempdir().unwrap();
    let secret_file = folder.path().join("client-secret");
    // A secret file ends in a newline, as `echo` writes it.
    write(&secret_file, "first secret\n");
    let endpoint = TokenEndpoint::start("first secret", Duration::from_secs(2)).await;
    let (guarded, seen) = FixtureServer::start_guarded(tools(), endpoint.guard()).await.unwrap();
    // A second server with no credentials of its own, recording what it is sent.
    let (open, open_seen) = FixtureServer::start_guarded(tools(), Arc::new(|_: &HeaderMap| true)).await.unwrap();
    let config_file = folder.path().join("servers.toml");
    write(
        &config_file,
        &format!(
            r#"
[servers.billing]
url = "{billing}"
oauth = {{ token_url = "{token_url}", client_id = "{CLIENT_ID}", client_secret = {{ file = "{secret}" }}, scope = "records:read", audience = "https://billing.example" }}

[servers.open]
url = "{open}"
"#,
            billing = guarded.url(),
            token_url = endpoint.url(),
            secret = secret_file.display(),
            open = open.url(),
        ),
    );
    let mut config = common::config(&[]);
    config.config_file = Some(config_file);
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(2).await;
    assert_eq!(endpoint.fetches(), 1, "one token for the connection");
    let form = &endpoint.forms()[0];
    assert_eq!(form.get("scope").map(String::as_str), Some("records:read"), "{form:?}");
    assert_eq!(form.get("audience").map(String::as_str), Some("https://billing.example"), "{form:?}");
    assert!(!form.contains_key("client_secret"), "basic client authentication by default: {form:?}");

    let client = client_with_token(&running.mcp_url(), "the-clients-own-token").await;
    let result = call(&client, "billing__lookup", "r1").await.unwrap();
    assert!(text_of(&result).contains("r1"), "{result:?}");
    assert_eq!(endpoint.fetches(), 1, "the cached token is used");

    // The token lives 2 s and is refreshed a tenth of its life early: after 1.9 s the next call
    // fetches a new one first, and the server never sees an expired one.
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    call(&client, "billing__lookup", "r2").await.unwrap();
    assert_eq!(endpoint.fetches(), 2, "refreshed before it expired");
    assert_eq!(seen.refused(), 0, "no request went out with an expired token");

    // The server stops taking the token (revoked): the call is refused once with 401, the
    // gateway fetches a new token and sends the request again.
    endpoint.revoke_all();
    let result = call(&client, "billing__lookup", "r3").await.unwrap();
    assert!(text_of(&result).contains("r3"), "{result:?}");
    assert_eq!(seen.refused(), 1);
    assert_eq!(endpoint.fetches(), 3, "one new token after the 401");

    // Every request the server had let in carried a token of the endpoint; the client's own
    // never reached it, nor the other server; the other server got no credentials at all.
    let authorizations = seen.values("authorization");
    assert!(!authorizations.is_empty());
    assert!(authorizations.iter().all(|v| v.starts_with("Bearer tok-")), "{authorizations:?}");
    call(&client, "open__lookup", "r4").await.unwrap();
    assert!(open_seen.values("authorization").is_empty(), "{:?}", open_seen.values("authorization"));
    for headers in seen.headers().iter().chain(open_seen.headers().iter()) {
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(!value.contains("the-clients-own-token"), "the client's token reached a server in {name}");
            assert!(!value.contains("first secret"), "the client secret reached a server in {name}");
        }
    }

    // The client secret is rotated: the endpoint takes only the new one. With the old one
    // still in the file, a call is refused with an error naming the endpoint's answer (and
    // never the secret); once the file holds the new secret, calls go through again.
    endpoint.set_secret("second secret");
    endpoint.revoke_all();
    let err = call(&client, "billing__lookup", "r5").await.expect_err("the gateway cannot get a token");
    assert!(err.contains("token endpoint") && err.contains("invalid_client"), "{err}");
    assert!(!err.contains("first secret") && !err.contains("second secret"), "{err}");
    let refusals = endpoint.refusals();
    assert!(refusals >= 1);
    write(&secret_file, "second secret\n");
    eventually(Duration::from_secs(30), "calls go through with the rotated secret", || async {
        let answer = async {
            let client = mcp::client(&running.mcp_url()).await;
            call(&client, "billing__lookup", "r6").await
        };
        match answer.await {
            Ok(result) if text_of(&result).contains("r6") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // What the gateway reports of its servers names no secret.
    for status in running.gateway.servers() {
        let text = format!("{status:?}");
        assert!(!text.contains("first secret") && !text.contains("second secret") && !text.contains("tok-"), "{text}");
    }
    client.cancel().await.unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_client_secret_is_told_without_the_secret() {
    let folder = tempfile::tempdir().unwrap();
    let endpoint = TokenEndpoint::start("the right secret", Duration::from_secs(300)).await;
    let (guarded, seen) = FixtureServer::start_guarded(tools(), endpoint.guard()).await.unwrap();
    let secret_file = folder.path().join("client-secret");
    write(&secret_file, "a wrong secret");
    let config_file = folder.path().join("servers.toml");
    write(
        &config_file,
        &format!(
            r#"
[servers.billing]
url = "{billing}"
oauth = {{ token_url = "{token_url}", client_id = "{CLIENT_ID}", client_secret = {{ file = "{secret}" }}, client_auth = "body" }}
"#,
            billing = guarded.url(),
            token_url = endpoint.url(),
            secret = secret_file.display(),
        ),
    );
    let mut config = common::config(&[]);
    config.config_file = Some(config_file);
    let running = common::start(&config, Stores::in_memory(), None).await;
    eventually(Duration::from_secs(30), "the server's error is reported", || async {
        let status = running.gateway.servers().into_iter().find(|s| s.name == "billing").unwrap();
        match status.last_error {
            Some(error) if error.contains("invalid_client") => Ok(error),
            other => Err(format!("{:?} {other:?}", status.state)),
        }
    })
    .await;
    let status = running.gateway.servers().into_iter().find(|s| s.name == "billing").unwrap();
    let error = status.last_error.unwrap();
    assert!(error.contains(&endpoint.url()) && error.contains("401"), "{error}");
    assert!(!error.contains("a wrong secret"), "{error}");
    // The secret went in the form body, as configured; nothing reached the server.
    assert_eq!(endpoint.forms()[0].get("client_secret").map(String::as_str), Some("a wrong secret"));
    assert!(seen.headers().is_empty(), "the server was never sent a request without a token");

    // The endpoint is not hammered: attempts back off.
    let before = endpoint.fetches();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let during = endpoint.fetches() - before;
    assert!(during <= 3, "{during} token requests in 1.5 s");

    // The right secret in the file: the next attempt connects.
    write(&secret_file, "the right secret");
    running.ready(1).await;
    let client = mcp::client(&running.mcp_url()).await;
    assert!(text_of(&call(&client, "billing__lookup", "k").await.unwrap()).contains("k"));
    client.cancel().await.unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_headers_from_a_secret_file_are_read_again_after_a_rotation() {
    let folder = tempfile::tempdir().unwrap();
    let key_file = folder.path().join("api-key");
    write(&key_file, "key-one\n");
    let accepted = Arc::new(Mutex::new("key-one".to_owned()));
    let guard: Guard = {
        let accepted = accepted.clone();
        Arc::new(move |headers: &HeaderMap| {
            let sent = headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or_default();
            let plain = headers.get("x-team").and_then(|v| v.to_str().ok()) == Some("search");
            sent == format!("key:{}", accepted.lock().unwrap()) && plain
        })
    };
    let (server, seen) = FixtureServer::start_guarded(tools(), guard).await.unwrap();
    let config_file = folder.path().join("servers.toml");
    write(
        &config_file,
        &format!(
            r#"
[servers.search]
url = "{url}"
headers = {{ X-Api-Key = {{ file = "{key}", prefix = "key:" }}, X-Team = "search" }}
"#,
            url = server.url(),
            key = key_file.display(),
        ),
    );
    let mut config = common::config(&[]);
    config.config_file = Some(config_file);
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(1).await;
    let client = mcp::client(&running.mcp_url()).await;
    assert!(text_of(&call(&client, "search__lookup", "a").await.unwrap()).contains("a"));

    // The key is rotated: the server takes only the new one, the file holds it. The first call
    // after is refused once, and sent again with the file read again.
    *accepted.lock().unwrap() = "key-two".to_owned();
    write(&key_file, "key-two\n");
    assert!(text_of(&call(&client, "search__lookup", "b").await.unwrap()).contains("b"));
    assert_eq!(seen.refused(), 1);
    assert_eq!(seen.values("x-api-key").last().map(String::as_str), Some("key:key-two"));
    client.cancel().await.unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stdio_server_gets_its_environment_from_secrets() {
    let folder = tempfile::tempdir().unwrap();
    let key_file = folder.path().join("api-key");
    write(&key_file, "stdio-secret-value\n");
    let config_file = folder.path().join("servers.toml");
    write(
        &config_file,
        &format!(
            r#"
[servers.every]
command = "{every}"
args = ["stdio"]
env = {{ API_KEY = {{ file = "{key}" }}, PACKAGE = {{ env = "CARGO_PKG_NAME", prefix = "pkg-" }}, MODE = "test" }}
"#,
            every = peer_tool("mcp-server-everything"),
            key = key_file.display(),
        ),
    );
    let mut config = common::config(&[]);
    config.config_file = Some(config_file);
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(10).await;
    let client = mcp::client(&running.mcp_url()).await;
    let params = CallToolRequestParams::new("every__get-env".to_owned());
    let result = client.call_tool(params).await.unwrap();
    let text = text_of(&result);
    let env: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"));
    assert_eq!(env["API_KEY"], "stdio-secret-value", "{env}");
    assert_eq!(env["PACKAGE"], "pkg-switchyard-mcp-gateway", "{env}");
    assert_eq!(env["MODE"], "test", "{env}");
    client.cancel().await.unwrap();
    running.stop().await;
}

#[test]
fn secrets_are_named_where_missing_and_never_shown() {
    let folder = tempfile::tempdir().unwrap();
    let secret_file = folder.path().join("token");
    write(&secret_file, "hunter2-token\n");
    let lookup = |name: &str| (name == "TEAM_TOKEN").then(|| "env-secret-value".to_owned());
    let text = format!(
        r#"
[servers.a]
url = "https://a.example/mcp"
headers = {{ Authorization = {{ env = "TEAM_TOKEN", prefix = "Bearer " }}, X-Key = "${{TEAM_TOKEN}}", X-File = {{ file = "{file}" }} }}
[servers.b]
url = "https://b.example/mcp"
oauth = {{ token_url = "https://auth.example/token", client_id = "gw", client_secret = {{ file = "{file}" }} }}
"#,
        file = secret_file.display()
    );
    let contents = parse_contents("servers.toml", &text, false, &lookup).unwrap();
    let shown = format!("{:?}", contents.servers);
    for secret in ["env-secret-value", "hunter2-token"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("TEAM_TOKEN"), "where a value comes from is shown: {shown}");

    let missing_file = folder.path().join("absent");
    let cases = [
        (
            "[servers.a]\nurl = 'https://a/mcp'\nheaders = { Authorization = { env = 'NOPE' } }\n".to_owned(),
            vec!["servers.a", "headers.Authorization", "`NOPE` is not set"],
        ),
        (
            format!("[servers.a]\ncommand = 'x'\nenv = {{ KEY = {{ file = '{}' }} }}\n", missing_file.display()),
            vec!["servers.a", "env.KEY", "cannot read"],
        ),
        (
            "[servers.a]\nurl = 'https://a/mcp'\noauth = { token_url = 'https://t/token', client_id = 'gw', client_secret = { env = 'NOPE' } }\n"
                .to_owned(),
            vec!["servers.a", "oauth.client_secret", "`NOPE` is not set"],
        ),
    ];
    for (text, expected) in cases {
        let err = parse_contents("servers.toml", &text, false, &lookup).unwrap_err().to_string();
        for part in expected {
            assert!(err.contains(part), "{text:?} gave {err:?}, expected {part:?}");
        }
    }
}

/// The example servers file loads as it is (its live part) and with its commented examples
/// (secret files and policies) uncommented, so what it shows stays valid.
#[test]
fn the_example_servers_file_and_its_commented_examples_load() {
    let path = switchyard_testkit::root().join("deploy/mcp-gateway/servers.example.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let stand_in = |_: &str| Some("stand-in".to_owned());
    let live = parse_contents("servers.example.toml", &text, false, &stand_in).unwrap();
    assert!(live.policies.policies.is_empty(), "the policies are examples, commented out");

    // A commented TOML line is `# [table]` or `# key = value`; prose never starts that way.
    let uncommented: Vec<String> = text
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    }) =>
            {
                rest.to_owned()
            }
            _ => line.to_owned(),
        })
        .collect();
    let secrets = tempfile::tempdir().unwrap();
    for name in ["billing-client-secret", "tickets-api-key"] {
        write(&secrets.path().join(name), "stand-in secret\n");
    }
    let uncommented = uncommented.join("\n").replace("/run/secrets/", &format!("{}/", secrets.path().display()));
    let all = parse_contents("servers.example.toml (uncommented)", &uncommented, false, &stand_in)
        .unwrap_or_else(|err| panic!("{err}\n{uncommented}"));
    let names: Vec<&str> = all.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["everything", "files", "memory", "search", "billing", "tickets", "wiki"]);
    let policies: Vec<&str> = all.policies.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(policies, ["finance-read-only", "contractors", "everyone"]);
    let billing = all.servers.iter().find(|s| s.name == "billing").unwrap();
    assert!(
        matches!(&billing.transport, switchyard_mcp_gateway::upstream::Transport::Http { oauth: Some(oauth), .. }
            if oauth.client_secret.expose() == "stand-in secret"),
        "{billing:?}"
    );
    assert!(!format!("{:?}", all.servers).contains("stand-in secret"));
}
