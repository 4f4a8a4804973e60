//! No secret reaches the logs: the whole suite (edge with API keys and tokens, router, sessions,
//! triggers) runs in this process with every service's logs captured at debug level, traffic
//! goes through each client API with real credentials, wrong ones and a vendor that echoes the
//! key it refused, and then the captured text is searched for every secret in play.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use common::{Auth, JWT_SECRET, Options, Stack};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::json;
use switchyard_kit::Secret;
use switchyard_testkit::llm::{Reply, ScriptedLlm};

/// The router's key for the vendor: distinctive, so a match cannot be chance.
const VENDOR_KEY: &str = "sk-vendor-secret-5d1f0b9c7a2e";
/// A key the edge never issued, sent as a caller would mistype it.
const WRONG_KEY: &str = "sy_wrong-secret-93ab17ce40f2d6";
/// A message the vendor answers with a 401 that echoes the router's key.
const REFUSED: &str = "please answer with the vendor refusing";

/// Everything this process logs (see [`common::captured_logs`]).
fn logs() -> Arc<Mutex<Vec<u8>>> {
    common::captured_logs(tracing::Level::DEBUG)
}

fn hs256_token() -> String {
    let exp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600;
    let claims = json!({"sub": "jo", "tenant": "acme", "exp": exp});
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(JWT_SECRET.as_bytes())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_with_keys_configured_logs_no_secret() {
    let logs = logs();
    let llm = ScriptedLlm::start(|request| match request.last_user_text() {
        Some(text) if text.contains(REFUSED) => Reply::error(401, format!("Incorrect API key provided: {VENDOR_KEY}")),
        _ => Reply::text("Hello there."),
    })
    .await;
    let options = Options {
        auth: Auth::Closed { jwks_file: None },
        configure_router: Box::new(|config| config.providers.openai_api_key = Some(Secret::new(VENDOR_KEY))),
        ..Options::default()
    };
    let stack = Stack::start(llm, options).await;
    let key = stack.key("acme", "jo", false).await;
    let admin_key = stack.key("acme", "ops", true).await;
    let token = hs256_token();

    // Each client API with a good key, the token, and headers as each SDK sends them.
    let chat = json!({"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]});
    let answered = stack.post("/v1/chat/completions", Some(&key), &chat).await;
    assert_eq!(answered.status(), 200, "{}", answered.text().await.unwrap());
    let streamed = stack
        .post(
            "/v1/chat/completions",
            Some(&token),
            &json!({"model": "openai/gpt-4o-mini", "stream": true, "messages": chat["messages"]}),
        )
        .await;
    assert_eq!(streamed.status(), 200);
    streamed.text().await.unwrap();
    let messages = stack
        .http
        .post(stack.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(
            &json!({"model": "openai/gpt-4o-mini", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(messages.status(), 200, "{}", messages.text().await.unwrap());
    let responses =
        stack.post("/v1/responses", Some(&key), &json!({"model": "openai/gpt-4o-mini", "input": "Hi"})).await;
    assert_eq!(responses.status(), 200, "{}", responses.text().await.unwrap());
    let rest = stack.post("/api/v1/chat", Some(&key), &json!({"message": "Hello again"})).await;
    assert_eq!(rest.status(), 200, "{}", rest.text().await.unwrap());
    let stats = stack.get("/api/v1/chat/stats", Some(&admin_key)).await;
    assert_eq!(stats.status(), 200, "{}", stats.text().await.unwrap());

    // Refusals: a wrong key in each place a key goes, a tampered token, the vendor refusing.
    assert_eq!(stack.post("/v1/chat/completions", Some(WRONG_KEY), &chat).await.status(), 401);
    let wrong_anthropic = stack.http.post(stack.url("/v1/messages")).header("x-api-key", WRONG_KEY).json(&chat).send();
    assert_eq!(wrong_anthropic.await.unwrap().status(), 401);
    let tampered = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(stack.post("/api/v1/chat", Some(&tampered), &json!({"message": "Hi"})).await.status(), 401);
    let refused = json!({"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": REFUSED}]});
    let vendor_refused = stack.post("/v1/chat/completions", Some(&key), &refused).await;
    assert!(vendor_refused.status().is_server_error() || vendor_refused.status().is_client_error());
    let body = vendor_refused.text().await.unwrap();
    assert!(!body.contains(VENDOR_KEY), "the vendor's echo of the key reached the caller: {body}");

    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    // The capture saw the run: the refusals and the vendor's error were logged.
    assert!(text.lines().count() > 20, "too little was captured to judge:\n{text}");
    assert!(text.contains("401"), "the refusals are not in the logs:\n{text}");
    for (name, secret) in [
        ("the vendor key", VENDOR_KEY),
        ("an API key", key.as_str()),
        ("the administrator's API key", admin_key.as_str()),
        ("a wrong API key", WRONG_KEY),
        ("a bearer token", token.as_str()),
        ("a tampered token", tampered.as_str()),
        ("the token signing secret", JWT_SECRET),
    ] {
        let leaks: Vec<&str> = text.lines().filter(|line| line.contains(secret)).collect();
        assert!(leaks.is_empty(), "{name} is in the logs:\n{}", leaks.join("\n"));
    }
}
