//! Authentication, tenants and limits end to end: API keys in a real Postgres, HS256 and RS256
//! tokens, tenant isolation through the real sessions service, administrator-only endpoints,
//! per-key rate limits, and the identity headers a caller may not set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{Auth, JWT_SECRET, Options, Stack, json};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

async fn closed(configure: impl FnOnce(&mut switchyard_edge::EdgeConfig) + Send + 'static) -> Stack {
    let llm = ScriptedLlm::start(|_| Reply::text("Hello.")).await;
    let auth = Auth::Closed { jwks_file: Some(fixture("rs256-test-jwks.json")) };
    Stack::start(llm, Options { auth, configure: Box::new(configure), ..Options::default() }).await
}

fn exp() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600
}

fn hs256(claims: Value) -> String {
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(JWT_SECRET.as_bytes())).unwrap()
}

fn rs256(claims: Value, kid: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    let der = std::fs::read(fixture("rs256-test-key.der")).unwrap();
    encode(&header, &claims, &EncodingKey::from_rsa_der(&der)).unwrap()
}

async fn new_session(stack: &Stack, key: &str) -> String {
    let (status, body) =
        json(stack.post("/api/context/sessions", Some(key), &json!({"initial_role_id": "tech-expert"})).await).await;
    assert_eq!(status, 200, "{body}");
    body["session"]["session_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn api_keys_are_required_checked_and_revocable() {
    let stack = closed(|_| {}).await;
    // No credential, a wrong key, a malformed header: 401 with a JSON body and a challenge.
    let response = stack.get("/api/context/roles", None).await;
    assert_eq!(response.headers()["www-authenticate"], "Bearer realm=\"switchyard\"");
    let (status, body) = json(response).await;
    assert_eq!((status, body["error"]["status"].as_str()), (401, Some("UNAUTHENTICATED")));
    let (status, _) = json(stack.get("/api/context/roles", Some("sy_0000_not-a-key")).await).await;
    assert_eq!(status, 401);
    let response =
        stack.http.get(stack.url("/api/context/roles")).header("authorization", "Basic YTpi").send().await.unwrap();
    assert_eq!(json(response).await.0, 401);

    let key = stack.key("acme", "ann", false).await;
    assert!(key.starts_with("sy_"));
    let (status, _) = json(stack.get("/api/context/roles", Some(&key)).await).await;
    assert_eq!(status, 200);
    // The `x-api-key` header works as well as the bearer form.
    let response = stack.http.get(stack.url("/api/context/roles")).header("x-api-key", &key).send().await.unwrap();
    assert_eq!(response.status(), 200);

    // Only the digest is stored.
    let keys = stack.keys.as_ref().unwrap();
    let listed = keys.list(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    let id = listed[0].id.clone();
    assert!(key.contains(&id) && !format!("{listed:?}").contains(&key[key.len() - 20..]));

    assert!(keys.revoke(&id).await.unwrap());
    let (status, body) = json(stack.get("/api/context/roles", Some(&key)).await).await;
    assert_eq!(status, 401, "a revoked key is refused: {body}");
    assert!(!keys.revoke(&id).await.unwrap(), "revoking twice reports nothing to revoke");

    // Probes, the console and the OpenAPI document need no credential.
    for path in ["/healthz", "/", "/openapi.json"] {
        assert_eq!(stack.get(path, None).await.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn one_tenant_cannot_read_anothers_session() {
    let stack = closed(|_| {}).await;
    let ann = stack.key("tenant-a", "ann", false).await;
    let bob = stack.key("tenant-b", "bob", false).await;
    let session = new_session(&stack, &ann).await;

    let (status, body) = json(stack.get(&format!("/api/context/sessions/{session}"), Some(&ann)).await).await;
    assert_eq!(status, 200);
    assert_eq!(body["session"]["tenant_id"], "tenant-a");
    let (status, _) = json(stack.get(&format!("/api/context/sessions/{session}"), Some(&bob)).await).await;
    assert_eq!(status, 404, "tenant B sees nothing of tenant A's session");
    let (status, _) = json(stack.get(&format!("/api/context/sessions/{session}/history"), Some(&bob)).await).await;
    assert_eq!(status, 404);
    let (status, _) =
        json(stack.post("/api/context/process", Some(&bob), &json!({"session_id": session, "query": "hello"})).await)
            .await;
    assert_eq!(status, 404);

    // Identity headers from the caller are ignored: the credential decides.
    let response = stack
        .http
        .get(stack.url(&format!("/api/context/sessions/{session}")))
        .bearer_auth(&bob)
        .header("x-tenant-id", "tenant-a")
        .header("x-user-id", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(json(response).await.0, 404);
    let response = stack
        .http
        .post(stack.url("/api/context/sessions"))
        .bearer_auth(&bob)
        .header("x-tenant-id", "tenant-a")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, created) = json(response).await;
    assert_eq!((status, created["session"]["tenant_id"].as_str()), (200, Some("tenant-b")));
}

#[tokio::test]
async fn tokens_name_the_tenant_hs256_and_rs256() {
    let stack = closed(|_| {}).await;
    let ann = hs256(json!({"tenant": "tenant-a", "sub": "ann", "exp": exp()}));
    let session = new_session(&stack, &ann).await;
    // The same user through an RS256 token from the JWKS file reads it; another user of the
    // tenant and another tenant do not.
    let ann_rs256 = rs256(json!({"tenant": "tenant-a", "sub": "ann", "exp": exp()}), "edge-test-1");
    let (status, body) = json(stack.get(&format!("/api/context/sessions/{session}"), Some(&ann_rs256)).await).await;
    assert_eq!(status, 200, "{body}");
    let carol = rs256(json!({"tenant": "tenant-a", "sub": "carol", "exp": exp()}), "edge-test-1");
    assert_eq!(json(stack.get(&format!("/api/context/sessions/{session}"), Some(&carol)).await).await.0, 404);
    let dave = rs256(json!({"tenant": "tenant-b", "sub": "dave", "exp": exp()}), "edge-test-1");
    assert_eq!(json(stack.get(&format!("/api/context/sessions/{session}"), Some(&dave)).await).await.0, 404);
    // A key id the JWKS does not hold, an expired token, a forged signature: 401.
    let unknown_kid = rs256(json!({"tenant": "tenant-a", "exp": exp()}), "rotated-away");
    let expired = hs256(json!({"tenant": "tenant-a", "exp": 1_000_000}));
    let mut forged = carol.clone();
    forged.truncate(forged.len() - 4);
    forged.push_str("AAAA");
    for token in [&unknown_kid, &expired, &forged] {
        let (status, body) = json(stack.get("/api/context/roles", Some(token)).await).await;
        assert_eq!(status, 401, "{body}");
    }
    // A valid token without a tenant: 403.
    let no_tenant = hs256(json!({"sub": "eve", "exp": exp()}));
    let (status, body) = json(stack.get("/api/context/roles", Some(&no_tenant)).await).await;
    assert_eq!((status, body["error"]["status"].as_str()), (403, Some("PERMISSION_DENIED")));
}

#[tokio::test]
async fn changing_roles_needs_an_administrator() {
    let stack = closed(|_| {}).await;
    let user = stack.key("acme", "ann", false).await;
    let admin = stack.key("acme", "root", true).await;
    let role =
        json!({"id": "wine-expert", "name": "Sommelier", "description": "Wine", "system_prompt": "You pair wine."});
    let (status, body) = json(stack.post("/api/context/roles", Some(&user), &role).await).await;
    assert_eq!((status, body["error"]["status"].as_str()), (403, Some("PERMISSION_DENIED")));
    let (status, body) = json(stack.post("/api/context/roles", Some(&admin), &role).await).await;
    assert_eq!(status, 200, "{body}");
    // A token grants it with the admin scope.
    let token = hs256(json!({"tenant": "acme", "sub": "ops", "exp": exp(), "scope": "openid switchyard:admin"}));
    let (status, _) =
        json(stack.send(reqwest::Method::DELETE, "/api/context/roles/wine-expert", Some(&token), &json!({})).await)
            .await;
    assert_eq!(status, 200);
    // Reading roles is for everyone.
    assert_eq!(json(stack.get("/api/context/roles", Some(&user)).await).await.0, 200);
}

#[tokio::test]
async fn each_key_has_its_own_rate_limit() {
    let stack = closed(|config| {
        config.rate_limit = 1;
        config.rate_burst = 3;
    })
    .await;
    let ann = stack.key("acme", "ann", false).await;
    let bob = stack.key("acme", "bob", false).await;
    for _ in 0..3 {
        assert_eq!(stack.get("/api/context/roles", Some(&ann)).await.status(), 200);
    }
    let response = stack.get("/api/context/roles", Some(&ann)).await;
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    let (status, body) = json(response).await;
    assert_eq!((status, body["error"]["status"].as_str()), (429, Some("RESOURCE_EXHAUSTED")));
    // Another key is unaffected; after the wait, ann is served again.
    assert_eq!(stack.get("/api/context/roles", Some(&bob)).await.status(), 200);
    tokio::time::sleep(std::time::Duration::from_secs(retry_after)).await;
    assert_eq!(stack.get("/api/context/roles", Some(&ann)).await.status(), 200);
}

#[tokio::test]
async fn cors_answers_preflight_for_configured_origins() {
    let stack = closed(|config| config.cors_origins = vec!["https://chat.example".into()]).await;
    let response = stack
        .http
        .request(reqwest::Method::OPTIONS, stack.url("/api/v1/chat"))
        .header("origin", "https://chat.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "https://chat.example");
    let response = stack
        .http
        .request(reqwest::Method::OPTIONS, stack.url("/api/v1/chat"))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());
}

/// A role a tenant's administrator creates, with a prompt no other tenant may ever read.
fn mortgage_role() -> Value {
    json!({
        "id": "mortgage-expert",
        "name": "Mortgage Expert",
        "description": "Home loans",
        "system_prompt": "ACME-SECRET: quote our internal rate sheet.",
        "custom_triggers": [{"pattern": "escrow", "kind": "TRIGGER_KIND_KEYWORD", "priority": 9}]
    })
}

#[tokio::test]
async fn a_tenants_roles_are_its_own_and_built_ins_are_read_only() {
    let stack = closed(|_| {}).await;
    let a_admin = stack.key("tenant-a", "root", true).await;
    let a_user = stack.key("tenant-a", "ann", false).await;
    let b_admin = stack.key("tenant-b", "boss", true).await;
    let b_user = stack.key("tenant-b", "carl", false).await;

    let (status, body) = json(stack.post("/api/context/roles", Some(&a_admin), &mortgage_role()).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["role"]["built_in"], false);
    let (status, body) = json(stack.get("/api/context/roles/mortgage-expert", Some(&a_user)).await).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["role"]["system_prompt"].as_str().unwrap().starts_with("ACME-SECRET"));

    // Tenant B: not found, however asked, and never the prompt.
    let (status, body) = json(stack.get("/api/context/roles/mortgage-expert", Some(&b_user)).await).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.to_string().contains("ACME-SECRET"));
    let (status, body) = json(stack.get("/api/context/roles", Some(&b_user)).await).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["roles"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"finance-expert") && !ids.contains(&"mortgage-expert"), "{ids:?}");
    assert!(!body.to_string().contains("ACME-SECRET"));
    let patch = json!({"system_prompt": "hijacked"});
    let response =
        stack.send(reqwest::Method::PATCH, "/api/context/roles/mortgage-expert", Some(&b_admin), &patch).await;
    assert_eq!(json(response).await.0, 404, "B's administrator cannot change A's role");
    let response =
        stack.send(reqwest::Method::DELETE, "/api/context/roles/mortgage-expert", Some(&b_admin), &json!({})).await;
    assert_eq!(json(response).await.0, 404, "nor delete it");
    let (status, _) =
        json(stack.post("/api/context/sessions", Some(&b_user), &json!({"initial_role_id": "mortgage-expert"})).await)
            .await;
    assert_eq!(status, 404, "nor start a session in it");
    let b_session = new_session(&stack, &b_user).await;
    let forced = json!({"session_id": b_session, "query": "escrow question", "force_role_id": "mortgage-expert"});
    assert_eq!(json(stack.post("/api/context/process", Some(&b_user), &forced).await).await.0, 404);
    let switch = json!({"session_id": b_session, "new_role_id": "mortgage-expert"});
    assert_eq!(json(stack.post("/api/context/switch", Some(&b_user), &switch).await).await.0, 404);
    // Its triggers never pull B's sessions into it, and B's scores never name it.
    let query = json!({"session_id": b_session, "query": "How does escrow work for my escrow account?"});
    let (status, turn) = json(stack.post("/api/context/process", Some(&b_user), &query).await).await;
    assert_eq!(status, 200, "{turn}");
    assert_ne!(turn["role_id"], "mortgage-expert");
    assert!(!turn.to_string().contains("mortgage-expert") && !turn.to_string().contains("ACME-SECRET"), "{turn}");
    // A's sessions do switch into it on its trigger.
    let a_session = new_session(&stack, &a_user).await;
    let query = json!({"session_id": a_session, "query": "How does escrow work for my escrow account?"});
    let (status, turn) = json(stack.post("/api/context/process", Some(&a_user), &query).await).await;
    assert_eq!((status, turn["role_id"].as_str()), (200, Some("mortgage-expert")), "{turn}");

    // The trigger registry every tenant shares is the operator's alone: B's administrator can
    // neither rewrite a built-in's triggers there nor read A's role's patterns from it.
    let put = json!({"domains": ["legal"]});
    let response = stack.send(reqwest::Method::PUT, "/api/triggers/roles/finance-expert", Some(&b_admin), &put).await;
    assert_eq!(json(response).await.0, 403);
    let response =
        stack.send(reqwest::Method::DELETE, "/api/triggers/roles/finance-expert", Some(&b_admin), &json!({})).await;
    assert_eq!(json(response).await.0, 403);
    let (status, body) = json(stack.get("/api/triggers/roles", Some(&b_admin)).await).await;
    assert_eq!(status, 403, "{body}");
    let detect = json!({"query": "How does escrow work?"});
    assert_eq!(json(stack.post("/api/triggers/detect", Some(&b_user), &detect).await).await.0, 403);
    assert_eq!(json(stack.get("/api/triggers/domains", Some(&b_user)).await).await.0, 200, "the packs are public");

    // A built-in is read-only for every tenant: updating makes B's own copy, seen by B alone.
    let (status, body) = json(stack.get("/api/context/roles/finance-expert", Some(&a_user)).await).await;
    assert_eq!((status, body["role"]["built_in"].as_bool()), (200, Some(true)));
    let builtin_prompt = body["role"]["system_prompt"].clone();
    let patch = json!({"system_prompt": "Tenant B's finance house style."});
    let response =
        stack.send(reqwest::Method::PATCH, "/api/context/roles/finance-expert", Some(&b_admin), &patch).await;
    let (status, body) = json(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["role"]["built_in"], false, "B's own copy");
    let (_, seen_by_b) = json(stack.get("/api/context/roles/finance-expert", Some(&b_user)).await).await;
    assert_eq!(seen_by_b["role"]["system_prompt"], "Tenant B's finance house style.");
    let (_, seen_by_a) = json(stack.get("/api/context/roles/finance-expert", Some(&a_user)).await).await;
    assert_eq!(seen_by_a["role"]["system_prompt"], builtin_prompt, "every other tenant keeps the built-in");
    let finance = "/api/context/roles/finance-expert";
    let response = stack.send(reqwest::Method::DELETE, finance, Some(&b_admin), &json!({})).await;
    assert_eq!(json(response).await.0, 200, "deleting B's copy brings the built-in back");
    let (_, seen_by_b) = json(stack.get(finance, Some(&b_user)).await).await;
    assert_eq!(seen_by_b["role"]["system_prompt"], builtin_prompt);
    let (status, body) = json(stack.send(reqwest::Method::DELETE, finance, Some(&b_admin), &json!({})).await).await;
    assert_eq!((status, body["error"]["status"].as_str()), (409, Some("FAILED_PRECONDITION")), "{body}");
    let response = stack.send(reqwest::Method::DELETE, finance, Some(&a_admin), &json!({})).await;
    assert_eq!(json(response).await.0, 409, "no tenant deletes a built-in");
}

#[tokio::test]
async fn a_session_is_its_users_and_its_tenant_administrators_may_read_it() {
    let stack = closed(|_| {}).await;
    let ann = stack.key("tenant-a", "ann", false).await;
    let bob = stack.key("tenant-a", "bob", false).await;
    let admin = stack.key("tenant-a", "root", true).await;
    let session = new_session(&stack, &ann).await;
    let path = format!("/api/context/sessions/{session}");

    let (status, body) = json(stack.get(&path, Some(&ann)).await).await;
    assert_eq!((status, body["session"]["user_id"].as_str()), (200, Some("ann")), "{body}");
    // Another user of the same tenant: not found, for every way in.
    assert_eq!(json(stack.get(&path, Some(&bob)).await).await.0, 404);
    assert_eq!(json(stack.get(&format!("{path}/history"), Some(&bob)).await).await.0, 404);
    let process = json!({"session_id": session, "query": "hello"});
    assert_eq!(json(stack.post("/api/context/process", Some(&bob), &process).await).await.0, 404);
    let switch = json!({"session_id": session, "new_role_id": "finance-expert"});
    assert_eq!(json(stack.post("/api/context/switch", Some(&bob), &switch).await).await.0, 404);
    let message = json!({"messages": [{"role": "MESSAGE_ROLE_USER", "content": "hi"}]});
    assert_eq!(json(stack.post(&format!("{path}/messages"), Some(&bob), &message).await).await.0, 404);
    let chat = json!({"message": "hello", "session_id": session});
    let (status, body) = json(stack.post("/api/v1/chat", Some(&bob), &chat).await).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(json(stack.send(reqwest::Method::DELETE, &path, Some(&bob), &json!({})).await).await.0, 404);
    // An administrator flag a client sends itself is never passed on.
    let response = stack
        .http
        .get(stack.url(&path))
        .bearer_auth(&bob)
        .header("x-switchyard-admin", "true")
        .header("x-user-id", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(json(response).await.0, 404);

    // The tenant's administrator reads it, history included.
    let (status, body) = json(stack.get(&path, Some(&admin)).await).await;
    assert_eq!((status, body["session"]["user_id"].as_str()), (200, Some("ann")), "{body}");
    assert_eq!(json(stack.get(&format!("{path}/history"), Some(&admin)).await).await.0, 200);
    // The owner still uses it: nothing above changed it.
    let (status, body) = json(stack.post("/api/v1/chat", Some(&ann), &chat).await).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = json(stack.get(&path, Some(&ann)).await).await;
    assert_eq!(body["session"]["turn_count"], 1, "{body}");
}
