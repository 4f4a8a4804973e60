//! Budgets through the edge: setting one is the operator's (403 for a tenant's administrator,
//! who may read its own); past the soft threshold the OpenAI, Anthropic and Responses answers
//! carry `x-switchyard-budget-warning`; a tenant whose budget is spent gets 429 naming the
//! budget in each API's error shape (REST chat, OpenAI Chat Completions, Anthropic Messages,
//! OpenAI Responses) while another tenant goes on. Each scripted answer reports 10 prompt and 5
//! completion tokens: $0.0000045 at the shipped price of openai/gpt-4o-mini, so five turns
//! spend a $0.00002 budget and the second passes a $0.000004 soft threshold.

mod common;

use common::{Auth, Options, Stack, json};
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
        let (status, answer) = json(stack.post(path, Some(&acme), body).await).await;
        assert_eq!(status, 429, "{path}: {answer}");
        assert!(answer.to_string().contains(spent), "{path}: {answer}");
    }
    let (status, body) = json(stack.post("/v1/chat/completions", Some(&globex), &openai).await).await;
    assert_eq!(status, 200, "another tenant goes on: {body}");
}
