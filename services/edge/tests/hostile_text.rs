//! Text Postgres refuses (a NUL) sent through the edge to the whole suite with durable stores:
//! a chat message holding one is answered and recorded safely, and never holds back another
//! tenant's record; catalog text holding one is refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Auth, Options, Stack, json};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use switchyard_testkit::{
    database_url, eventually,
    llm::{Reply, ScriptedLlm},
};

async fn durable_stack() -> Stack {
    let llm = ScriptedLlm::start(|_| Reply::text("Noted.")).await;
    Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, durable_sessions: true, ..Options::default() })
        .await
}

fn violation(body: &Value) -> Option<&str> {
    body["error"]["details"][0]["field_violations"][0]["field"].as_str()
}

/// Rows of `table` in `schema` for `tenant`.
async fn rows(schema: &str, table: &str, tenant: &str) -> i64 {
    let mut db = PgConnection::connect(&database_url()).await.expect("postgres at DATABASE_URL");
    let statement = format!("SELECT count(*) FROM \"{schema}\".{table} WHERE tenant_id = $1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(statement)).bind(tenant).fetch_one(&mut db).await.unwrap()
}

async fn chat(stack: &Stack, key: &str, body: Value) -> Value {
    let (status, answer) = json(stack.post("/api/v1/chat", Some(key), &body).await).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn a_nul_in_a_chat_message_is_answered_recorded_safely_and_holds_no_other_tenant_back() {
    let stack = durable_stack().await;
    let schema = stack.sessions_schema.clone().unwrap();
    let ann = stack.key("acme", "ann@acme.io", false).await;
    let bob = stack.key("globex", "bob@globex.io", false).await;

    let answer = chat(&stack, &ann, json!({"message": "refinance my mortgage \u{0}"})).await;
    assert_eq!(answer["choices"][0]["message"]["content"], "Noted.");
    // The model was given the message as it was sent.
    let asked = stack.llm.requests().iter().filter_map(|r| r.last_user_text()).collect::<Vec<_>>();
    assert!(asked.iter().any(|text| text.contains("mortgage \u{0}")), "{asked:?}");

    // Another tenant's turns after it: every switch and message lands in Postgres.
    let first = chat(&stack, &bob, json!({"message": "How do I refinance my mortgage at a lower rate?"})).await;
    let session = first["session_id"].as_str().unwrap().to_owned();
    for message in ["What does the contract's termination clause say?", "And my index fund portfolio?"] {
        chat(&stack, &bob, json!({"message": message, "session_id": session})).await;
    }
    eventually(Duration::from_secs(15), "the second tenant's record written", || async {
        let (messages, switches) =
            (rows(&schema, "session_messages", "globex").await, rows(&schema, "session_switches", "globex").await);
        // Three questions and three answers; the questions move between domains.
        if messages >= 6 && switches >= 2 { Ok(()) } else { Err(format!("{messages} messages, {switches} switches")) }
    })
    .await;

    // The first tenant's message is kept, its NUL as U+FFFD.
    let mut db = PgConnection::connect(&database_url()).await.unwrap();
    let statement = format!("SELECT content FROM \"{schema}\".session_messages WHERE tenant_id = 'acme' ORDER BY seq");
    let contents: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(statement)).fetch_all(&mut db).await.unwrap();
    assert_eq!(contents.first().map(String::as_str), Some("refinance my mortgage \u{FFFD}"), "{contents:?}");
}

#[tokio::test]
async fn a_nul_in_a_roles_text_is_refused_naming_the_field() {
    let stack = durable_stack().await;
    let admin = stack.key("acme", "root@acme.io", true).await;
    let role = |system_prompt: &str, pattern: &str| {
        json!({"id": "mortgage-expert", "name": "Mortgage expert", "description": "Home loans",
               "system_prompt": system_prompt,
               "custom_triggers": [{"pattern": pattern, "kind": "TRIGGER_KIND_KEYWORD", "priority": 5}]})
    };
    let (status, body) =
        json(stack.post("/api/context/roles", Some(&admin), &role("You know\u{0} mortgages.", "mortgage")).await).await;
    assert_eq!((status, violation(&body)), (400, Some("role.system_prompt")), "{body}");
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    let (status, body) =
        json(stack.post("/api/context/roles", Some(&admin), &role("You know mortgages.", "mort\u{0}gage")).await).await;
    assert_eq!((status, violation(&body)), (400, Some("role.custom_triggers[0].pattern")), "{body}");
    let (status, body) =
        json(stack.post("/api/context/roles", Some(&admin), &role("You know mortgages.", "mortgage")).await).await;
    assert_eq!(status, 200, "{body}");
    let patch = json!({"description": "Loans\u{0}"});
    let (status, body) =
        json(stack.send(reqwest::Method::PATCH, "/api/context/roles/mortgage-expert", Some(&admin), &patch).await)
            .await;
    assert_eq!((status, violation(&body)), (400, Some("role.description")), "{body}");

    // Session metadata is stored and handed back as given: refused too.
    let user = stack.key("acme", "ann@acme.io", false).await;
    let (status, body) =
        json(stack.post("/api/context/sessions", Some(&user), &json!({"metadata": {"channel": "web\u{0}"}})).await)
            .await;
    assert_eq!((status, violation(&body)), (400, Some("metadata[channel]")), "{body}");
}

#[tokio::test]
async fn an_api_key_name_with_a_nul_is_refused_naming_the_field() {
    let stack = durable_stack().await;
    let keys = stack.keys.as_ref().unwrap();
    let tenant = switchyard_kit::TenantId::parse("acme").unwrap();
    let err = keys.create(&tenant, None, "ci\0bot", false).await.expect_err("refused");
    assert!(err.to_string().starts_with("name: "), "{err}");
    keys.create(&tenant, None, "ci-bot", false).await.expect("created without the NUL");
}
