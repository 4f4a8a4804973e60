//! Providers failing in bursts — 5xx and answers slower than the timeout, coming and going —
//! behind everything the router puts in front of them (two deployments each, a circuit each,
//! a fallback model): every call ends within the bound its settings promise, answered or not.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use switchyard_llm::{CircuitSettings, ModelRef, ProviderArgs, StreamEvent};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};

use crate::support::question;

const TIMEOUT: Duration = Duration::from_millis(300);
const MAX_RETRIES: u32 = 1;

/// A vendor whose requests come in bursts of four: four answered, then four failed — 500s
/// and answers two seconds late, well past the timeout — and so on. `offset` shifts the bursts
/// so that two vendors are not down together every time.
fn bursty(offset: usize) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    let count = Arc::new(AtomicUsize::new(offset));
    move |_| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        match (n / 4 % 2, n % 2) {
            (0, _) => Reply::text("answered"),
            (_, 0) => Reply::error(500, "burst"),
            (_, _) => Reply::text("too late").delay(Duration::from_secs(2)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_ends_within_its_bound_through_bursts_of_failures() {
    let servers = [
        ScriptedLlm::start(bursty(0)).await,
        ScriptedLlm::start(bursty(2)).await,
        ScriptedLlm::start(bursty(4)).await,
        ScriptedLlm::start(bursty(6)).await,
    ];
    let providers = ProviderArgs {
        openai_base_urls: vec![servers[0].openai_base_url(), servers[1].openai_base_url()],
        anthropic_base_urls: vec![servers[2].anthropic_base_url(), servers[3].anthropic_base_url()],
        openai_timeout: TIMEOUT,
        anthropic_timeout: TIMEOUT,
        max_retries: MAX_RETRIES,
        deployment_cooldown: Duration::from_millis(200),
        ..ProviderArgs::default()
    }
    .build()
    .unwrap()
    .with_circuits(CircuitSettings { failures: 3, cooldown: Duration::from_millis(500) });
    let order: Vec<ModelRef> = vec!["openai/gpt-test".parse().unwrap(), "anthropic/claude-test".parse().unwrap()];

    // The bound: per model, `MAX_RETRIES + 1` attempts (each on another deployment, no backoff
    // between them), each waiting at most the timeout for the headers and again for the body;
    // then the fallback model the same. Half a second more for two busy cores.
    let per_model = TIMEOUT * 2 * (MAX_RETRIES + 1);
    let bound = per_model * order.len() as u32 + Duration::from_millis(500);

    let mut answered = 0;
    let mut failed = 0;
    let mut slowest = Duration::ZERO;
    for wave in 0..6 {
        let calls = (0..8).map(|n| {
            let (providers, order) = (&providers, &order);
            async move {
                let started = Instant::now();
                let ok = if (wave + n) % 2 == 0 {
                    providers.complete_with_fallback(order, question("hi")).await.is_ok()
                } else {
                    match providers.stream_with_fallback(order, question("hi")).await {
                        Ok(answer) => {
                            let events: Vec<_> = answer.output.collect().await;
                            matches!(events.last(), Some(Ok(StreamEvent::Done(_))))
                        }
                        Err(_) => false,
                    }
                };
                (ok, started.elapsed())
            }
        });
        for (ok, took) in futures::future::join_all(calls).await {
            assert!(took <= bound, "a call took {took:?}, past its bound of {bound:?}");
            slowest = slowest.max(took);
            if ok {
                answered += 1;
            } else {
                failed += 1;
            }
        }
    }
    eprintln!("48 calls: {answered} answered, {failed} failed, slowest {slowest:?} (bound {bound:?})");
    // Both sides of the bursts were met: calls answered between them, and calls that found
    // both models failing (or skipped by their circuits and cooldowns) failed, in time too.
    assert!(answered > 0, "the vendors answered between their bursts, so some calls must have");
    assert!(failed > 0, "every call was answered: the bursts never met both models at once");
}
