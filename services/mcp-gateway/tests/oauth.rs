//! The MCP endpoint as an OAuth 2.1 protected resource (`--auth oauth`) and behind the edge's
//! API keys (`--auth keys`): the test kit's authorization server issues RS256 tokens, the
//! Python SDK's OAuth client finds its way from a bare 401 to a token and calls tools over both
//! protocol revisions, raw HTTP checks every refusal and its `WWW-Authenticate`, a policy
//! selected by a token scope applies, a real downstream server never sees the client's token,
//! and keys created in the real Postgres key table work until revoked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::HashMap, process::Command, sync::Arc, time::Duration};

use serde_json::{Map, Value, json};
use switchyard_auth::KeyStore;
use switchyard_kit::{Secret, TenantId, UserId};
use switchyard_mcp_gateway::{Stores, audit::AuditQuery, auth::AuthMode};
use switchyard_testkit::{
    Schema, database_url, eventually, free_port,
    mcp::{FixtureServer, Seen, tool},
    oauth::{AuthorizationServer, Client, SigningKey, now},
    peer_tool, root,
};

fn fixture_tools() -> Vec<rmcp::model::Tool> {
    vec![
        tool("outfit_ideas", "Suggests what to wear for an occasion and the weather.", &["occasion"]),
        tool("sql_from_text", "Turns a question into an SQL query for a database.", &["question"]),
        tool("currency_convert", "Converts an amount between currencies.", &["amount"]),
    ]
}

/// Read-only callers (the `mcp:readonly` scope) may not run SQL; `contractors` may not dress.
const POLICIES: &str = r#"
[[policies]]
name = "readonly"
scopes = ["mcp:readonly"]
deny_tools = ["fx__sql_*"]

[[policies]]
name = "contractors"
groups = ["contractors"]
deny_tools = ["fx__outfit_*"]
"#;

struct Setup {
    issuer: AuthorizationServer,
    fixture: FixtureServer,
    seen: Seen,
    running: common::Running,
    audience: String,
    _dir: tempfile::TempDir,
}

fn client(secret: &str, scope: &str, claims: Value) -> Client {
    let Value::Object(claims) = claims else { panic!("claims are an object") };
    Client { secret: secret.into(), scope: scope.into(), claims }
}

/// An authorization server, a downstream server that records what it is sent, and a gateway
/// in oauth mode whose audience is its own `/mcp` URL (API keys too when `keys_schema`).
async fn setup(keys_schema: Option<&str>) -> Setup {
    let clients = HashMap::from([
        ("ide".to_owned(), client("ide-secret", "mcp:tools mcp:readonly", json!({"tenant": "acme"}))),
        ("bot".to_owned(), client("bot-secret", "other", json!({}))),
    ]);
    let issuer = AuthorizationServer::start(clients).await.unwrap();
    let (fixture, seen) = FixtureServer::start_guarded(fixture_tools(), Arc::new(|_| true)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("servers.toml");
    std::fs::write(&policies, POLICIES).unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, issuer.jwks().to_string()).unwrap();

    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    config.mcp_listen = ([127, 0, 0, 1], port).into();
    config.config_file = Some(policies);
    config.auth.mode = AuthMode::Oauth;
    config.auth.oauth_issuer = Some(issuer.issuer().to_owned());
    config.auth.oauth_audience = Some(audience.clone());
    config.auth.oauth_jwks_file = Some(jwks);
    if let Some(schema) = keys_schema {
        config.auth.keys_db_schema = Some(schema.to_owned());
        config.auth.key_cache_ttl = Duration::ZERO;
        config.stores.database_url = Some(Secret::new(database_url()));
    }
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(3).await;
    Setup { issuer, fixture, seen, running, audience, _dir: dir }
}

fn python(url: &str, issuer: &str, client: &str, secret: &str, scope: &str) -> Value {
    let script = root().join("services/mcp-gateway/tests/clients/python_oauth.py");
    let output = Command::new(peer_tool("mcp-python"))
        .args([&script.display().to_string(), url, issuer, client, secret, scope])
        .output()
        .expect("mcp-python (scripts/install-tools.sh)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python client failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}\n{stderr}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_finds_the_issuer_gets_a_token_and_calls_tools_for_both_revisions() {
    let setup = setup(None).await;
    let (url, issuer) = (setup.running.mcp_url(), setup.issuer.issuer().to_owned());
    assert_eq!(url, setup.audience);
    let report =
        tokio::task::spawn_blocking(move || python(&url, &issuer, "ide", "ide-secret", "mcp:tools mcp:readonly"))
            .await
            .unwrap();
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    assert_eq!(report["stateless_protocol"], "2026-07-28", "{report}");
    // The SDK asks for the scope the 401 challenge names (the MCP authorization spec's order:
    // the challenge's `scope`, then the metadata's), not the one it was configured with, so the
    // token carries `mcp:tools` alone and the `readonly` policy does not select this caller: the
    // SQL tools stay listed and callable (scope-selected policies are checked with minted
    // tokens in `tokens_are_checked_and_refusals_point_at_the_metadata`).
    assert_eq!(report["token_scope"], "mcp:tools", "{report}");
    for list in ["all", "filtered", "stateless_all"] {
        let names = strings(&report[list]);
        assert!(names.contains(&"fx__outfit_ideas".to_owned()), "{list}: {names:?}");
        assert!(names.contains(&"fx__sql_from_text".to_owned()), "{list}: {names:?}");
    }
    for call in ["sql_call", "stateless_sql_call"] {
        assert!(report[call]["text"].as_str().unwrap().contains("sql_from_text called with"), "{call}: {report}");
    }
    for call in ["call", "stateless_call"] {
        assert!(report[call]["text"].as_str().unwrap().contains("outfit_ideas called with"), "{call}: {report}");
    }
    // RFC 8707: every token was asked for this resource.
    let resources = setup.issuer.token_resources();
    assert_eq!(resources.len(), 2, "one token per client: {resources:?}");
    assert!(resources.iter().all(|r| r.as_deref() == Some(setup.audience.as_str())), "{resources:?}");
    // The downstream server served the calls and never saw a credential of the client's.
    assert!(!setup.seen.headers().is_empty(), "the downstream server was called");
    assert!(setup.seen.values("authorization").is_empty(), "{:?}", setup.seen.values("authorization"));
    for headers in setup.seen.headers() {
        for (name, value) in &headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(!value.contains("eyJ"), "a JWT reached the downstream server in `{name}`");
        }
    }
    setup.running.stop().await;
    drop(setup.fixture);
    setup.issuer.stop().await;
}

/// One JSON-RPC request as a 2026-07-28 client sends it, with these extra headers.
async fn rpc(url: &str, headers: &[(&str, &str)], method: &str, params: Value) -> (u16, Option<String>, Value) {
    let mut params = params;
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response =
        request.json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})).send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
    let body = if status == 200 {
        common::stateless_answer(response).await
    } else {
        response.json().await.unwrap_or(Value::Null)
    };
    (status, challenge, body)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_and_refusals_point_at_the_metadata() {
    let setup = setup(None).await;
    let (url, audience, issuer) = (setup.running.mcp_url(), setup.audience.clone(), &setup.issuer);
    let port = setup.running.mcp.port();
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");

    // RFC 9728 metadata, at the path-suffixed and the root well-known URL, without a token.
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let metadata: Value =
            reqwest::get(format!("http://127.0.0.1:{port}{path}")).await.unwrap().json().await.unwrap();
        assert_eq!(metadata["resource"], audience.as_str(), "{path}: {metadata}");
        assert_eq!(metadata["authorization_servers"], json!([issuer.issuer()]), "{metadata}");
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]), "{metadata}");
        assert_eq!(metadata["scopes_supported"], json!(["mcp:tools", "mcp:readonly"]), "{metadata}");
    }

    let list = json!({});
    // No token: 401 naming the metadata, no error code (RFC 6750 section 3.1).
    let (status, challenge, _) = rpc(&url, &[], "tools/list", list.clone()).await;
    assert_eq!(status, 401);
    let challenge = challenge.expect("WWW-Authenticate");
    assert!(challenge.starts_with("Bearer ") && !challenge.contains("error="), "{challenge}");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");

    let claims = |change: &dyn Fn(&mut Map<String, Value>)| {
        let Value::Object(mut claims) = issuer.claims(&audience, "mcp:tools") else { unreachable!() };
        change(&mut claims);
        Value::Object(claims)
    };
    let forger = SigningKey::generate("test-key-1");
    let hs256_with_public_key = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims(&|_| {}),
        &jsonwebtoken::EncodingKey::from_secret(issuer.jwks()["keys"][0]["n"].as_str().unwrap().as_bytes()),
    )
    .unwrap();
    let refused = [
        (
            "wrong audience",
            issuer.mint(&claims(&|c| drop(c.insert("aud".into(), json!("https://other.example/mcp"))))),
            "aud",
        ),
        ("expired", issuer.mint(&claims(&|c| drop(c.insert("exp".into(), json!(now() - 600))))), "expired"),
        ("not yet valid", issuer.mint(&claims(&|c| drop(c.insert("nbf".into(), json!(now() + 600))))), "nbf"),
        ("forged", forger.sign(&claims(&|_| {})), "signature"),
        ("wrong issuer", issuer.mint(&claims(&|c| drop(c.insert("iss".into(), json!("https://evil.example"))))), "iss"),
        ("no exp", issuer.mint(&claims(&|c| drop(c.remove("exp")))), "exp"),
        ("HS256 with the public key", hs256_with_public_key, "HS256"),
        ("not a JWT", "sy_not_a_key".to_owned(), "JWT"),
    ];
    for (case, token, said) in refused {
        let (status, challenge, body) =
            rpc(&url, &[("authorization", &bearer(&token))], "tools/list", list.clone()).await;
        assert_eq!(status, 401, "{case}: {body}");
        let challenge = challenge.unwrap_or_else(|| panic!("{case}: no WWW-Authenticate"));
        assert!(challenge.contains("error=\"invalid_token\""), "{case}: {challenge}");
        assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{case}: {challenge}");
        assert!(body["error_description"].as_str().unwrap().contains(said), "{case}: {body}");
    }

    // A valid token without the endpoint's scope: 403 insufficient_scope, naming the scope.
    let (status, challenge, _) = rpc(
        &url,
        &[("authorization", &bearer(&issuer.mint(&issuer.claims(&audience, "other"))))],
        "tools/list",
        list.clone(),
    )
    .await;
    assert_eq!(status, 403);
    let challenge = challenge.unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("scope=\"mcp:tools\""),
        "{challenge}"
    );

    // A valid token: identity from its claims alone. It names the group `contractors` (the
    // outfit tool is denied) and no readonly scope (SQL is allowed); headers claiming another
    // tenant, user or groups change nothing.
    let token = issuer.mint(&claims(&|c| {
        c.insert("groups".into(), json!(["contractors"]));
        c.insert("tenant_id".into(), json!("acme"));
    }));
    let spoofed = [
        ("authorization", bearer(&token)),
        ("x-tenant-id", "evil".to_owned()),
        ("x-user-id", "mallory".to_owned()),
        ("x-switchyard-groups", "".to_owned()),
        ("x-switchyard-role", "Not A Role".to_owned()),
    ];
    let spoofed: Vec<(&str, &str)> = spoofed.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, _, listed) = rpc(&url, &spoofed, "tools/list", list.clone()).await;
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"fx__sql_from_text") && !names.contains(&"fx__outfit_ideas"), "{names:?}");
    let call = json!({"name": "fx__outfit_ideas", "arguments": {"occasion": "party"}});
    let (_, _, refused) = rpc(&url, &spoofed, "tools/call", call).await;
    assert!(refused["error"]["message"].as_str().unwrap().contains("denied by policy `contractors`"), "{refused}");
    // A token with the `mcp:readonly` scope selects the `readonly` policy: no SQL tool listed,
    // and a call to one refused.
    let readonly = issuer.mint(&claims(&|c| {
        c.insert("scope".into(), json!("mcp:tools mcp:readonly"));
    }));
    let headers = [("authorization", bearer(&readonly))];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, _, listed) = rpc(&url, &headers, "tools/list", list.clone()).await;
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"fx__outfit_ideas") && !names.iter().any(|n| n.starts_with("fx__sql_")), "{names:?}");
    let call = json!({"name": "fx__sql_from_text", "arguments": {"question": "how many"}});
    let (_, _, refused) = rpc(&url, &headers, "tools/call", call).await;
    assert!(refused["error"]["message"].as_str().unwrap().contains("denied by policy `readonly`"), "{refused}");
    // The call is recorded for the token's tenant and subject, not the headers'.
    setup.running.gateway.flush_records().await.unwrap();
    let query = AuditQuery { tool: Some("fx__outfit_ideas".into()), limit: 10, ..AuditQuery::default() };
    let calls = setup.running.gateway.audit(query).await.unwrap();
    let call = calls.first().unwrap_or_else(|| panic!("the refused call is audited: {calls:?}"));
    assert_eq!((call.tenant.as_str(), call.user.as_deref()), ("acme", Some("ann")), "{call:?}");
    assert_eq!(call.groups, ["contractors"], "{call:?}");
    setup.running.stop().await;
}

/// A verified token is taken on trust for later requests only while its key is in the JWKS:
/// rotate the file to a new key and the old token is refused (once the file is re-read), while
/// a token from the new key is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_token_stops_when_its_key_leaves_the_jwks() {
    let setup = setup(None).await;
    let (url, audience, issuer) = (setup.running.mcp_url(), setup.audience.clone(), &setup.issuer);
    let list = json!({});
    let old = issuer.mint(&issuer.claims(&audience, "mcp:tools"));
    for _ in 0..3 {
        let (status, _, body) = rpc(&url, &[("authorization", &bearer(&old))], "tools/list", list.clone()).await;
        assert_eq!(status, 200, "{body}");
    }

    let rotated = SigningKey::generate("rotated-key");
    std::fs::write(setup._dir.path().join("jwks.json"), rotated.jwks().to_string()).unwrap();
    let within = switchyard_auth::jwks::FILE_RECHECK + Duration::from_secs(10);
    eventually(within, "the old key's token is refused after the rotation", || async {
        let (status, _, _) = rpc(&url, &[("authorization", &bearer(&old))], "tools/list", list.clone()).await;
        status == 401
    })
    .await;
    let new = rotated.sign(&issuer.claims(&audience, "mcp:tools"));
    let (status, _, body) = rpc(&url, &[("authorization", &bearer(&new))], "tools/list", list.clone()).await;
    assert_eq!(status, 200, "the new key's token: {body}");
    setup.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edges_api_keys_work_until_revoked() {
    let schema = Schema::new("gw_keys");
    let keys = KeyStore::connect(&database_url(), schema.name(), Duration::ZERO).await.expect("key table");
    let tenant = TenantId::parse("acme").unwrap();
    let key = keys.create(&tenant, Some(&UserId::parse("ann").unwrap()), "gateway", false).await.unwrap();
    let fixture = FixtureServer::start(fixture_tools()).await.unwrap();
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    config.auth.mode = AuthMode::Keys;
    config.auth.keys_db_schema = Some(schema.name().to_owned());
    config.auth.key_cache_ttl = Duration::ZERO;
    config.stores.database_url = Some(Secret::new(database_url()));
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(3).await;
    let url = running.mcp_url();

    let (status, challenge, _) = rpc(&url, &[], "tools/list", json!({})).await;
    assert_eq!((status, challenge.as_deref()), (401, Some("Bearer")));
    for header in [("authorization", bearer(&key.secret)), ("x-api-key", key.secret.clone())] {
        let (status, _, listed) = rpc(&url, &[(header.0, header.1.as_str())], "tools/list", json!({})).await;
        assert_eq!(status, 200, "{}: {listed}", header.0);
        assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(4), "{listed}");
    }
    let (status, _, body) = rpc(&url, &[("authorization", "Bearer sy_0000_nope")], "tools/list", json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert!(keys.revoke(&key.key.id).await.unwrap());
    let (status, challenge, body) =
        rpc(&url, &[("authorization", &bearer(&key.secret))], "tools/list", json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert!(challenge.unwrap().contains("invalid_token"));
    assert!(body["error_description"].as_str().unwrap().contains("revoked"), "{body}");
    running.stop().await;

    // In oauth mode with a key table named, keys are accepted beside tokens.
    let other = keys.create(&tenant, None, "ide", false).await.unwrap();
    let setup = setup(Some(schema.name())).await;
    let (status, _, listed) =
        rpc(&setup.running.mcp_url(), &[("authorization", &bearer(&other.secret))], "tools/list", json!({})).await;
    assert_eq!(status, 200, "{listed}");
    setup.running.stop().await;
}

#[tokio::test]
async fn oauth_without_issuer_or_audience_does_not_start() {
    let mut config = common::config(&[]);
    config.auth.mode = AuthMode::Oauth;
    config.auth.oauth_audience = Some("https://mcp.example/mcp".into());
    let err = switchyard_mcp_gateway::GatewayServer::bind_with(&config, Stores::in_memory(), None).await.err().unwrap();
    assert!(format!("{err:#}").contains("--oauth-issuer"), "{err:#}");
    config.auth.oauth_issuer = Some("https://idp.example".into());
    config.auth.oauth_audience = None;
    let err = switchyard_mcp_gateway::GatewayServer::bind_with(&config, Stores::in_memory(), None).await.err().unwrap();
    assert!(format!("{err:#}").contains("--oauth-audience"), "{err:#}");
}
