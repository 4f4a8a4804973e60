//! The logs while a provider is down stay bounded: its circuit opening is logged once, and the
//! calls that then skip it (every request, at once) log their first occurrence and afterwards
//! at most one line per interval carrying how many were not logged; every skip is still
//! reported to the caller.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use switchyard_llm::{CircuitBreaker, CircuitSettings, CircuitState, ErrorKind, ModelRef, ProviderConfig, Providers};
use switchyard_testkit::llm::{Reply, ScriptedLlm, Wire};

use crate::support::{Vendor, question};

const INTERVAL: Duration = Duration::from_millis(500);
const SKIPPED: usize = 200;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn suppressed(line: &str) -> u64 {
    let at = line.find("suppressed=").unwrap_or_else(|| panic!("no suppressed count in {line}"));
    let digits: String = line[at + "suppressed=".len()..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[tokio::test]
async fn an_open_circuit_logs_its_skipped_calls_once_per_interval_with_the_count_not_logged() {
    switchyard_kit::log::set_repeat_interval(INTERVAL);
    let logs = Capture::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    // Thread-local: the test's current-thread runtime runs every call (and the vendor) here.
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = ScriptedLlm::start(|recorded| match recorded.wire {
        Wire::OpenAi => Reply::error(503, "overloaded"),
        Wire::Anthropic => Reply::text("from claude"),
    })
    .await;
    let openai = Vendor::OpenAi.provider(ProviderConfig { max_retries: 0, ..Vendor::OpenAi.config(&server) });
    // A cooldown longer than the test: the circuit stays open throughout.
    let settings = CircuitSettings { failures: 3, cooldown: Duration::from_secs(600) };
    let breaker = Arc::new(CircuitBreaker::new(openai, settings));
    let mut providers = Providers::default();
    providers.insert(breaker.clone());
    providers.insert(Vendor::Anthropic.on(&server));
    let order: Vec<ModelRef> = vec!["openai/gpt-test".parse().unwrap(), "anthropic/claude-test".parse().unwrap()];

    for _ in 0..3 {
        let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
        assert_eq!(answered.failed[0].error.kind, ErrorKind::Server);
    }
    assert_eq!(breaker.state(), CircuitState::Open);

    let started = Instant::now();
    for _ in 0..SKIPPED {
        let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
        // The caller still hears of every skip.
        assert_eq!(answered.failed[0].error.kind, ErrorKind::CircuitOpen);
    }
    let burst = started.elapsed();
    // One more skip after a quiet interval: its line carries what the burst did not log.
    tokio::time::sleep(INTERVAL).await;
    let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(answered.failed[0].error.kind, ErrorKind::CircuitOpen);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let opened: Vec<&&str> = lines.iter().filter(|l| l.contains("provider circuit changed")).collect();
    assert_eq!(opened.len(), 1, "the opening is logged once, at once:\n{text}");
    assert!(opened[0].contains("to=\"open\"") || opened[0].contains("to=open"), "{}", opened[0]);

    let skipped: Vec<&&str> =
        lines.iter().filter(|l| l.contains("model failed") && l.contains("CircuitOpen")).collect();
    // The first skip at once, then one line per interval the burst spanned, and the last one.
    let bound = 2 + (burst.as_millis() / INTERVAL.as_millis()) as usize;
    assert!(
        (2..=bound).contains(&skipped.len()),
        "{} lines for {} skips in {burst:?} (at most {bound}):\n{text}",
        skipped.len(),
        SKIPPED + 1
    );
    assert_eq!(suppressed(skipped[0]), 0, "the first occurrence logs with nothing held");
    let accounted: u64 = skipped.iter().map(|line| 1 + suppressed(line)).sum();
    assert_eq!(accounted, SKIPPED as u64 + 1, "every skip is logged or counted in a line:\n{text}");

    // The three failures that opened the circuit: the first logged, the rest at most per interval.
    let failed: Vec<&&str> = lines.iter().filter(|l| l.contains("model failed") && l.contains("kind=Server")).collect();
    assert!((1..=3).contains(&failed.len()), "{text}");
}
