//! What the caller sees when things go wrong: bad input named by field, vendors that rate
//! limit or fail (retries, the fallback model, every provider named when all fail), and keys
//! that never leak into errors.

mod common;

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use common::{OPENAI_KEY, Options, Suite, chat};
use switchyard_proto::router::v1::{ChatMessage, ChatRole, RouteType};
use switchyard_testkit::llm::{Reply, ScriptedLlm, Wire};
use tonic::Code;
use tonic_types::StatusExt;

fn bad_field(status: &tonic::Status) -> String {
    let details = status.get_error_details();
    let violations = details.bad_request().map(|b| b.field_violations.clone()).unwrap_or_default();
    violations.first().map(|v| v.field.clone()).unwrap_or_default()
}

#[tokio::test]
async fn bad_requests_name_the_field_and_reach_no_model() {
    let llm = ScriptedLlm::start(|_| Reply::text("should not be called")).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;

    let cases = [
        (chat(""), "message"),
        (chat(&"x".repeat(40 * 1024)), "message"),
        (
            {
                let mut r = chat("hi");
                r.model = Some("gpt-4o".into());
                r
            },
            "model",
        ),
        (
            {
                let mut r = chat("hi");
                r.force_route = 7;
                r
            },
            "force_route",
        ),
        (
            {
                let mut r = chat("hi");
                r.temperature = Some(-1.0);
                r
            },
            "temperature",
        ),
        (
            {
                let mut r = chat("hi");
                r.max_tokens = Some(0);
                r
            },
            "max_tokens",
        ),
        (
            {
                let mut r = chat("hi");
                r.session_id = "no spaces allowed".into();
                r
            },
            "session_id",
        ),
        (
            {
                let mut r = chat("hi");
                r.history = vec![ChatMessage { role: 9, content: "x".into(), ..Default::default() }];
                r
            },
            "history[0].role",
        ),
        (
            {
                let mut r = chat("hi");
                r.history =
                    vec![ChatMessage { role: ChatRole::Tool as i32, content: "x".into(), ..Default::default() }];
                r
            },
            "history[0].tool_call_id",
        ),
    ];
    for (request, field) in cases {
        let status = client.chat(request).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert_eq!(bad_field(&status), field, "{status:?}");
        assert!(status.message().starts_with(field), "{}", status.message());
    }

    let mut request = chat("hi");
    request.model = Some("mistral/large".into());
    let status = client.chat(request).await.expect_err("no such provider");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("mistral"), "{}", status.message());

    let mut request = chat("hi");
    request.force_role_id = Some("ghost-expert".into());
    let status = client.chat(request).await.expect_err("unknown role");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("ghost-expert") && !status.message().contains("session_id"),
        "{}",
        status.message()
    );

    let mut request = chat("hi");
    request.session_id = "never-created".into();
    let status = client.chat(request).await.expect_err("unknown session");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(suite.llm.requests().is_empty(), "no model was called");
}

#[tokio::test]
async fn a_rate_limited_call_is_retried_after_the_vendors_delay() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let llm = ScriptedLlm::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::error(429, "Rate limit reached for requests").retry_after(1)
        } else {
            Reply::text("answered after the retry")
        }
    })
    .await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let response = client.chat(chat("Hello")).await.expect("chat").into_inner();
    assert_eq!(response.message.expect("message").content, "answered after the retry");
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].received_at - requests[0].received_at;
    assert!(waited >= std::time::Duration::from_millis(900), "Retry-After honoured: {waited:?}");
    let metadata = response.metadata.expect("metadata");
    assert_eq!((metadata.model_fallbacks, metadata.route_type()), (0, RouteType::Direct));
    assert_eq!(metadata.attempts, 2, "the routing call was retried once");
}

#[tokio::test]
async fn a_failing_provider_falls_back_to_the_next_model() {
    let llm = ScriptedLlm::start(|request| match request.wire {
        Wire::OpenAi => Reply::error(503, "The engine is currently overloaded"),
        Wire::Anthropic => Reply::text("the fallback model answered"),
    })
    .await;
    let options = Options { fallback_models: vec!["anthropic/claude-3-5-haiku-latest"], ..Options::default() };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let response = client.chat(chat("Hello")).await.expect("chat").into_inner();
    assert_eq!(response.message.expect("message").content, "the fallback model answered");
    assert_eq!(response.model, "anthropic/claude-3-5-haiku-latest");
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.model_fallbacks, 1);
    assert_eq!(metadata.routing_model, "anthropic/claude-3-5-haiku-latest");
    // OpenAI was tried twice (max_retries 1) before the fallback.
    let wires: Vec<Wire> = suite.llm.requests().iter().map(|r| r.wire).collect();
    assert_eq!(wires, [Wire::OpenAi, Wire::OpenAi, Wire::Anthropic]);
}

#[tokio::test]
async fn when_every_model_fails_the_error_names_each_provider_and_no_key() {
    let llm = ScriptedLlm::start(|request| match request.wire {
        Wire::OpenAi => Reply::error(500, "upstream exploded"),
        Wire::Anthropic => Reply::error(401, "invalid x-api-key"),
    })
    .await;
    let options = Options { fallback_models: vec!["anthropic/claude-3-5-haiku-latest"], ..Options::default() };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let status = client.chat(chat("Hello")).await.expect_err("every model failed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let message = status.message();
    assert!(message.contains("openai/gpt-4o-mini") && message.contains("upstream exploded"), "{message}");
    assert!(
        message.contains("anthropic/claude-3-5-haiku-latest") && message.contains("invalid x-api-key"),
        "{message}"
    );
    assert!(!message.contains(OPENAI_KEY) && !message.contains(common::ANTHROPIC_KEY), "{message}");
}

#[tokio::test]
async fn without_any_provider_chat_is_refused_with_what_to_set() {
    let llm = ScriptedLlm::start(|_| Reply::text("unused")).await;
    let options = Options {
        configure: Box::new(|config| config.providers = switchyard_llm::ProviderArgs::default()),
        ..Options::default()
    };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let status = client.chat(chat("Hello")).await.expect_err("no provider");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("OPENAI_API_KEY"), "{}", status.message());
}

#[tokio::test]
async fn a_nul_is_passed_to_the_model_in_content_and_refused_in_identifiers() {
    let llm = ScriptedLlm::start(|_| Reply::text("Noted.")).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;

    let mut request = chat("hi");
    request.model = Some("openai/gpt-4o-mini\0".into());
    let status = client.chat(request).await.expect_err("refused");
    assert_eq!((status.code(), bad_field(&status)), (Code::InvalidArgument, "model".to_owned()), "{status:?}");
    let mut request = chat("hi");
    request.force_role_id = Some("finance-expert\0".into());
    let status = client.chat(request).await.expect_err("refused");
    assert_eq!((status.code(), bad_field(&status)), (Code::InvalidArgument, "force_role_id".to_owned()), "{status:?}");
    assert!(suite.llm.requests().is_empty(), "no model was called");

    // Conversation content goes to the model as it was sent, and its decision is recorded.
    let answer = client.chat(chat("refinance my mortgage \0")).await.expect("chat").into_inner();
    let asked = suite.llm.requests().iter().filter_map(|r| r.last_user_text()).collect::<Vec<_>>();
    assert!(asked.iter().any(|text| text.contains("mortgage \0")), "{asked:?}");
    // Feedback finds the recorded decision; its comment (recorded free text) may hold a NUL,
    // its response id (an identifier) may not.
    let feedback = |response_id: &str| switchyard_proto::router::v1::SubmitFeedbackRequest {
        response_id: response_id.to_owned(),
        helpful: false,
        comment: "wrong \0 answer".into(),
        ..Default::default()
    };
    client.submit_feedback(feedback(&answer.id)).await.expect("feedback with a NUL in its comment");
    let status = client.submit_feedback(feedback(&format!("{}\0", answer.id))).await.expect_err("refused");
    assert_eq!((status.code(), bad_field(&status)), (Code::InvalidArgument, "response_id".to_owned()), "{status:?}");
}
