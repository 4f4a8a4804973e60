//! Budgets through the edge: setting one is the operator's (403 for a tenant's administrator,
//! who may read its own), and a tenant whose budget is spent gets 429 naming the budget in each
//! API's error shape (REST chat, OpenAI Chat Completions, Anthropic Messages, OpenAI
//! Responses) while another tenant goes on. Each scripted answer reports 10 prompt and 5
//! completion tokens: $0.0000045 at the shipped price of openai/gpt-4o-mini, so one turn spends
//! a $0.000001 budget.

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
    let budget = json!({"budget": {"tenant_id": "acme", "limit_usd": 0.000001, "period": "BUDGET_PERIOD_DAY"}});

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
    let (status, body) = json(stack.post("/v1/chat/completions", Some(&acme), &openai).await).await;
    assert_eq!(status, 200, "the first turn is under the budget: {body}");

    let spent = "budget acme of $0.000001 per day is spent ($0.000005)";
    let anthropic =
        json!({"model": "switchyard", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]});
    let responses = json!({"model": "switchyard", "input": "hello"});
    let rest = json!({"message": "hello"});
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
