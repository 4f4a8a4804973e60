//! A provider's circuit over real HTTP: it opens after failures in a row, calls then skip the
//! provider without reaching it, and after the cooldown one probe decides.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use switchyard_llm::{CircuitBreaker, CircuitSettings, CircuitState, ErrorKind, ModelRef, ProviderConfig, Providers};
use switchyard_testkit::llm::{Reply, ScriptedLlm, Wire};

use crate::support::{Vendor, question};

const COOLDOWN: Duration = Duration::from_millis(300);

fn openai_requests(server: &ScriptedLlm) -> usize {
    server.requests().iter().filter(|r| r.wire == Wire::OpenAi).count()
}

#[tokio::test]
async fn an_open_circuit_sends_calls_straight_to_the_next_model_until_a_probe_answers() {
    let healthy = Arc::new(AtomicBool::new(false));
    let vendor_up = healthy.clone();
    let server = ScriptedLlm::start(move |recorded| match recorded.wire {
        Wire::OpenAi if vendor_up.load(Ordering::SeqCst) => Reply::text("from gpt"),
        Wire::OpenAi => Reply::error(500, "internal error"),
        Wire::Anthropic => Reply::text("from claude"),
    })
    .await;
    let openai = Vendor::OpenAi.provider(ProviderConfig { max_retries: 0, ..Vendor::OpenAi.config(&server) });
    let breaker = Arc::new(CircuitBreaker::new(openai, CircuitSettings { failures: 3, cooldown: COOLDOWN }));
    let mut providers = Providers::default();
    providers.insert(breaker.clone());
    providers.insert(Vendor::Anthropic.on(&server));
    let order: Vec<ModelRef> = vec!["openai/gpt-test".parse().unwrap(), "anthropic/claude-test".parse().unwrap()];
    let ask = || providers.complete_with_fallback(&order, question("hi"));

    for _ in 0..3 {
        let answered = ask().await.unwrap();
        assert_eq!(answered.output.content, "from claude");
        assert_eq!(answered.failed[0].error.kind, ErrorKind::Server);
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    assert_eq!(openai_requests(&server), 3);

    // Open: skipped at once, the vendor is not called, for streams too.
    let answered = ask().await.unwrap();
    assert_eq!(answered.output.content, "from claude");
    let skipped = &answered.failed[0].error;
    assert_eq!((skipped.kind, skipped.provider.as_str()), (ErrorKind::CircuitOpen, "openai"));
    assert!(skipped.to_string().contains("probed again in"), "{skipped}");
    let streamed = providers.stream_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(streamed.failed[0].error.kind, ErrorKind::CircuitOpen);
    assert_eq!(openai_requests(&server), 3);

    // After the cooldown one probe reaches the vendor; it fails, so the circuit reopens.
    tokio::time::sleep(COOLDOWN).await;
    let answered = ask().await.unwrap();
    assert_eq!(answered.failed[0].error.kind, ErrorKind::Server);
    assert_eq!(openai_requests(&server), 4);
    assert_eq!(breaker.state(), CircuitState::Open);
    assert_eq!(ask().await.unwrap().failed[0].error.kind, ErrorKind::CircuitOpen);
    assert_eq!(openai_requests(&server), 4);

    // The vendor recovers: the next probe answers and closes the circuit.
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(COOLDOWN).await;
    let answered = ask().await.unwrap();
    assert_eq!((answered.output.content.as_str(), answered.failed.len()), ("from gpt", 0));
    assert_eq!(breaker.state(), CircuitState::Closed);
    assert_eq!(ask().await.unwrap().output.content, "from gpt");
    assert_eq!(openai_requests(&server), 6);
}

#[tokio::test]
async fn the_callers_mistakes_never_open_the_circuit() {
    let server = ScriptedLlm::start(|_| Reply::error(400, "unknown model")).await;
    let providers = {
        let mut providers = Providers::default();
        providers.insert(Vendor::OpenAi.provider(ProviderConfig { max_retries: 0, ..Vendor::OpenAi.config(&server) }));
        providers.with_circuits(CircuitSettings { failures: 2, cooldown: Duration::from_secs(60) })
    };
    let order: Vec<ModelRef> = vec!["openai/gpt-test".parse().unwrap()];
    for _ in 0..5 {
        let failed = providers.complete_with_fallback(&order, question("hi")).await.unwrap_err();
        assert_eq!(failed.failures[0].error.kind, ErrorKind::Rejected);
    }
    assert_eq!(server.requests().len(), 5);
}
