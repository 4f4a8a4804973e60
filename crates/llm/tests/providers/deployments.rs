//! Several deployments of one provider, configured as the router is (`OPENAI_BASE_URLS`,
//! `OPENAI_API_KEYS`), each a scripted vendor of its own over real HTTP: calls are balanced
//! over the healthy ones, one answering 429 is skipped for its Retry-After and used again
//! after, and when all fail the model falls back to the next one.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use switchyard_kit::Secret;
use switchyard_llm::{ErrorKind, ModelRef, ProviderArgs, Providers, StreamEvent};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

use crate::support::{Vendor, question};

const KEY_A: &str = "sk-test-deployment-a-5e0c";
const KEY_B: &str = "sk-test-deployment-b-91f7";

/// `openai` as two deployments, `a` with one key and `b` with the other.
fn two_deployments(a: &ScriptedLlm, b: &ScriptedLlm, cooldown: Duration) -> Providers {
    ProviderArgs {
        openai_base_urls: vec![a.openai_base_url(), b.openai_base_url()],
        openai_api_keys: vec![Secret::new(KEY_A), Secret::new(KEY_B)],
        deployment_cooldown: cooldown,
        ..ProviderArgs::default()
    }
    .build()
    .unwrap()
}

fn models(names: &[&str]) -> Vec<ModelRef> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

#[tokio::test]
async fn calls_are_balanced_over_the_healthy_deployments_each_with_its_key() {
    let a = ScriptedLlm::start(|_| Reply::text("from a")).await;
    let b = ScriptedLlm::start(|_| Reply::text("from b")).await;
    let providers = two_deployments(&a, &b, Duration::from_secs(5));
    let order = models(&["openai/gpt-test"]);
    for _ in 0..10 {
        let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
        assert!(answered.failed.is_empty());
    }
    for _ in 0..4 {
        let answered = providers.stream_with_fallback(&order, question("hi")).await.unwrap();
        let events: Vec<_> = answered.output.collect().await;
        assert!(matches!(events.last(), Some(Ok(StreamEvent::Done(_)))), "{events:?}");
    }
    assert_eq!((a.requests().len(), b.requests().len()), (7, 7), "round-robin");
    for (server, key) in [(&a, KEY_A), (&b, KEY_B)] {
        for request in server.requests() {
            assert_eq!(request.header("authorization"), Some(format!("Bearer {key}").as_str()));
        }
    }
}

#[tokio::test]
async fn a_rate_limited_deployment_gets_no_calls_during_its_retry_after_and_is_used_again_after() {
    // `a` answers its first request 429 with Retry-After: 1, then answers.
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let a = ScriptedLlm::start(move |_| match counted.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::error(429, "rate limited").retry_after(1),
        _ => Reply::text("from a"),
    })
    .await;
    let b = ScriptedLlm::start(|_| Reply::text("from b")).await;
    // A cooldown far below the Retry-After: the vendor's word is what is honoured.
    let providers = two_deployments(&a, &b, Duration::from_millis(50));
    let order = models(&["openai/gpt-test"]);

    // The first call goes to `a` (the first in turn), is refused, and `b` answers it.
    let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!((answered.output.content.as_str(), answered.failed.len()), ("from b", 0));
    let limited_at = a.requests()[0].received_at;

    // For most of the second asked, every call is `b`'s.
    let mut calls = 0;
    while limited_at.elapsed() < Duration::from_millis(800) {
        let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
        assert_eq!(answered.output.content, "from b");
        calls += 1;
    }
    assert!(calls >= 3, "only {calls} calls made while `a` cooled");
    assert_eq!(a.requests().len(), 1, "`a` was called during its Retry-After");

    // After it, `a` takes its turn again.
    tokio::time::sleep_until((limited_at + Duration::from_millis(1050)).into()).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(providers.complete_with_fallback(&order, question("hi")).await.unwrap().output.content);
    }
    assert_eq!(answers.iter().filter(|answer| *answer == "from a").count(), 2, "{answers:?}");
    let requests = a.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].received_at >= limited_at + Duration::from_secs(1));
}

#[tokio::test]
async fn when_every_deployment_fails_the_model_falls_back_and_then_skips_them_at_once() {
    let a = ScriptedLlm::start(|_| Reply::error(500, "a broke")).await;
    let b = ScriptedLlm::start(|_| Reply::error(503, "b overloaded")).await;
    let fallback = ScriptedLlm::start(|_| Reply::text("from claude")).await;
    let mut providers = two_deployments(&a, &b, Duration::from_secs(30));
    providers.insert(Vendor::Anthropic.on(&fallback));
    let order = models(&["openai/gpt-test", "anthropic/claude-test"]);

    // Both deployments are tried, each once, then the fallback model answers.
    let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(answered.output.content, "from claude");
    assert_eq!(answered.failed[0].error.kind, ErrorKind::Server);
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));

    // Both cooling: the model is skipped at once, without a request, streams too.
    let started = Instant::now();
    let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
    let skipped = &answered.failed[0].error;
    assert_eq!((skipped.kind, skipped.provider.as_str()), (ErrorKind::Cooling, "openai"));
    assert!(skipped.message.contains("all 2 deployments are cooling down"), "{skipped}");
    let streamed = providers.stream_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(streamed.failed[0].error.kind, ErrorKind::Cooling);
    assert!(started.elapsed() < Duration::from_secs(1), "the skip waited {:?}", started.elapsed());
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));
    assert_eq!(fallback.requests().len(), 3);
    let shown = format!("{answered:?}");
    assert!(!shown.contains(KEY_A) && !shown.contains(KEY_B), "a key in {shown}");
}

#[tokio::test]
async fn a_refused_request_is_not_tried_on_another_deployment_nor_cools_one() {
    let a = ScriptedLlm::start(|_| Reply::error(400, "unknown model")).await;
    let b = ScriptedLlm::start(|_| Reply::error(400, "unknown model")).await;
    let providers = two_deployments(&a, &b, Duration::from_secs(30));
    let order = models(&["openai/gpt-test"]);
    for _ in 0..4 {
        let failed = providers.complete_with_fallback(&order, question("hi")).await.unwrap_err();
        assert_eq!(failed.failures[0].error.kind, ErrorKind::Rejected);
    }
    assert_eq!((a.requests().len(), b.requests().len()), (2, 2), "one request per call, in turn");
}
