//! Budgets through the edge: setting one is the operator's (403 for a tenant's administrator,
//! who may read its own); past the soft threshold every answer, streamed or not, carries
//! `x-switchyard-budget-warning` (OpenAI Chat Completions, Anthropic Messages, OpenAI Responses,
//! REST chat and its stream); a tenant whose budget is spent gets 429 naming the budget in each
//! API's error shape, streamed or not, with `Retry-After` the seconds to the period's end (not a
//! rate limit's 1 s), while another tenant goes on. Each scripted answer reports 10 prompt and 5
//! completion tokens: $0.0000045 at the shipped price of openai/gpt-4o-mini, so five turns
//! spend a $0.00002 budget and the second passes a $0.000004 soft threshold.

mod common;

use common::{Auth, Options, Stack, json, parse_events};
use serde_json::json;
use switchyard_testkit::llm::{Reply, ScriptedLlm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_429_in_every_api_and_only_the_operator_sets_one() {
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.")).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let operator = stack.key("default", "ops", true).await;
    let acme_admin = stack.key("acme", "ann", true).await;
    let acme = stack.key("acme", "bob", false).await;
    let globex = stack.key("globex", "gil", false).await;
    let budget = json!({"budget": {"tenant_id": "acme", "limit_usd": 0.00002, "soft_usd": 0.000004, "period": "BUDGET_PERIOD_DAY"}});

    let (status, body) = json(stack.post("/api/v1/budgets", Some(&acme_admin), &budget).await).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = json(stack.post("/api/v1/budgets", Some(&operator), &budget).await).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = json(stack.get("/api/v1/budgets", Some(&acme_admin)).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["budgets"][0]["tenant_id"], "acme", "{body}");
    let (status, body) = json(stack.get("/api/v1/budgets", Some(&acme)).await).await;
    assert_eq!(status, 403, "not an administrator: {body}");

    let openai = json!({"model": "switchyard", "messages": [{"role": "user", "content": "hello"}]});
    let anthropic =
        json!({"model": "switchyard", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]});
    let responses = json!({"model": "switchyard", "input": "hello"});
    let rest = json!({"message": "hello"});
    let first = stack.post("/v1/chat/completions", Some(&acme), &openai).await;
    assert!(first.headers().get("x-switchyard-budget-warning").is_none(), "nothing spent yet");
    let (status, body) = json(first).await;
    assert_eq!(status, 200, "the first turn is under the budget: {body}");
    for (path, body) in [("/v1/chat/completions", &openai), ("/v1/messages", &anthropic), ("/v1/responses", &responses)]
    {
        let answer = stack.post(path, Some(&acme), body).await;
        let warning = answer.headers().get("x-switchyard-budget-warning").map(|v| v.to_str().unwrap_or("").to_owned());
        let (status, body) = json(answer).await;
        assert_eq!(status, 200, "{path}: {body}");
        let warning = warning.unwrap_or_else(|| panic!("{path}: no budget warning"));
        assert!(warning.starts_with("budget acme of $0.000020 per day: "), "{path}: {warning}");
    }
    let (status, body) = json(stack.post("/api/v1/chat", Some(&acme), &rest).await).await;
    assert_eq!(status, 200, "the fifth turn starts under the limit: {body}");

    let spent = "budget acme of $0.000020 per day is spent (";
    for (path, body) in [
        ("/v1/chat/completions", &openai),
        ("/v1/messages", &anthropic),
        ("/v1/responses", &responses),
        ("/api/v1/chat", &rest),
    ] {
        let refused = stack.post(path, Some(&acme), body).await;
        let retry_after = retry_after(&refused);
        let (status, answer) = json(refused).await;
        assert_eq!(status, 429, "{path}: {answer}");
        assert!(answer.to_string().contains(spent), "{path}: {answer}");
        assert_until_midnight(path, retry_after);
    }
    let (status, body) = json(stack.post("/v1/chat/completions", Some(&globex), &openai).await).await;
    assert_eq!(status, 200, "another tenant goes on: {body}");
}

/// The `Retry-After` header's seconds.
fn retry_after(response: &reqwest::Response) -> Option<u64> {
    response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

/// A daily budget comes back at the next UTC midnight: `Retry-After` says so, give or take the
/// time the request took.
fn assert_until_midnight(path: &str, retry_after: Option<u64>) {
    let now = chrono::Utc::now();
    let midnight = (now.date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).expect("midnight").and_utc();
    let ahead = u64::try_from((midnight - now).num_seconds()).expect("midnight is ahead");
    let retry_after = retry_after.unwrap_or_else(|| panic!("{path}: no Retry-After on a spent budget"));
    assert!((ahead..=ahead + 30).contains(&retry_after), "{path}: Retry-After {retry_after}, midnight in {ahead} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_answers_carry_the_warning_and_a_spent_budget_refuses_them_before_they_start() {
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.")).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let operator = stack.key("default", "ops", true).await;
    let acme = stack.key("acme", "bob", false).await;
    let initech = stack.key("initech", "ida", false).await;
    for budget in [
        json!({"budget": {"tenant_id": "acme", "limit_usd": 0.001, "soft_usd": 0.000004, "period": "BUDGET_PERIOD_DAY"}}),
        json!({"budget": {"tenant_id": "initech", "limit_usd": 0.000004, "period": "BUDGET_PERIOD_DAY"}}),
    ] {
        let (status, body) = json(stack.post("/api/v1/budgets", Some(&operator), &budget).await).await;
        assert_eq!(status, 200, "{body}");
    }

    let openai = json!({"model": "switchyard", "messages": [{"role": "user", "content": "hello"}], "stream": true});
    let anthropic = json!({"model": "switchyard", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hello"}]});
    let responses = json!({"model": "switchyard", "input": "hello", "stream": true});
    let rest = json!({"message": "hello"});
    let first = stack.post("/v1/chat/completions", Some(&acme), &openai).await;
    assert!(first.headers().get("x-switchyard-budget-warning").is_none(), "nothing spent yet");
    assert_eq!(first.status(), 200);
    assert!(first.text().await.expect("stream").contains("[DONE]"), "the first stream finishes");

    // Past the soft threshold: every answer says so in its headers, before its stream is read.
    for (path, body) in [
        ("/v1/chat/completions", &openai),
        ("/v1/messages", &anthropic),
        ("/v1/responses", &responses),
        ("/api/v1/chat/stream", &rest),
        ("/api/v1/chat", &rest),
    ] {
        let answer = stack.post(path, Some(&acme), body).await;
        let warning = answer.headers().get("x-switchyard-budget-warning").map(|v| v.to_str().unwrap_or("").to_owned());
        let status = answer.status().as_u16();
        let text = answer.text().await.expect("body");
        assert_eq!(status, 200, "{path}: {text}");
        let warning = warning.unwrap_or_else(|| panic!("{path}: no budget warning"));
        assert!(warning.starts_with("budget acme of $0.001000 per day: "), "{path}: {warning}");
        assert!(warning.contains("past its soft threshold of $0.000004"), "{path}: {warning}");
        if path != "/api/v1/chat" {
            let events = parse_events(&text);
            assert!(events.len() > 2, "{path}: the stream goes on: {text}");
            assert!(
                !events.iter().any(|(name, data)| matches!(name.as_str(), "error" | "failed")
                    || data.get("error").is_some_and(|e| !e.is_null())),
                "{path}: {text}"
            );
        }
    }

    // initech's first turn spends its budget; its streams are then refused up front, a 429 in
    // each API's shape with the time to midnight to retry after.
    let (status, body) = json(stack.post("/api/v1/chat", Some(&initech), &rest).await).await;
    assert_eq!(status, 200, "{body}");
    let spent = "budget initech of $0.000004 per day is spent (";
    for (path, body) in [
        ("/v1/chat/completions", &openai),
        ("/v1/messages", &anthropic),
        ("/v1/responses", &responses),
        ("/api/v1/chat/stream", &rest),
    ] {
        let refused = stack.post(path, Some(&initech), body).await;
        let retry_after = retry_after(&refused);
        let (status, answer) = json(refused).await;
        assert_eq!(status, 429, "{path}: {answer}");
        assert!(answer.to_string().contains(spent), "{path}: {answer}");
        assert_until_midnight(path, retry_after);
    }
}
