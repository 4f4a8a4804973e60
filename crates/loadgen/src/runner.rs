//! Drives a scenario: spawns the workers, paces their calls, and gathers what they measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::mpsc::UnboundedReceiver;
use tonic::Code;

use crate::pacer;
use crate::scenario::Scenario;
use crate::schedule::Schedule;
use crate::stats::Stats;

/// How much load to send, for how long.
#[derive(Debug, Clone, Copy)]
pub struct RunPlan {
    /// Number of workers, each with at most one call in flight.
    pub concurrency: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Total requests per second for an open loop; `None` for a closed loop.
    pub rate: Option<f64>,
    /// A call still running after this long is abandoned and counted as DEADLINE_EXCEEDED, so
    /// that a stuck call cannot hold the run open.
    pub call_timeout: Duration,
}

/// When a worker sends its next call.
enum Pacing {
    /// As soon as its previous call completes.
    ClosedLoop,
    /// When the pacer releases it. Each release carries the call's due time and latency counts
    /// from then, so a slow response that delays the worker's next calls is charged to those
    /// calls too (no coordinated omission).
    OpenLoop(UnboundedReceiver<Instant>),
}

/// How long after the window closes an open-loop worker that is behind schedule may still send
/// calls that were due inside it. Long enough that scheduling jitter on the last few calls is
/// not reported as unsent; short enough that a saturated target cannot stretch the run.
const CATCH_UP_GRACE: Duration = Duration::from_millis(100);

/// The phases of a run, on the monotonic clock: warm-up from `start` to `measure_from`, then
/// measurement until `end`. A call belongs to the phase in which it was due (open loop) or sent
/// (closed loop).
#[derive(Debug, Clone, Copy)]
struct Clock {
    start: Instant,
    measure_from: Instant,
    end: Instant,
    /// Open loop: no call is sent after this, however far behind its worker is.
    last_send: Instant,
}

pub struct RunOutcome {
    pub stats: Stats,
    /// From the end of the warm-up to the last recorded completion (at least the planned
    /// duration): the calls still in flight when the window closes are counted, and so is their time.
    pub measured: Duration,
}

pub async fn run<S: Scenario>(scenario: Arc<S>, plan: &RunPlan) -> anyhow::Result<RunOutcome> {
    let workers = plan.concurrency.max(1);
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    let clock = Clock { start, measure_from, end, last_send: end + CATCH_UP_GRACE };

    let pacing: Vec<Pacing> = match plan.rate {
        Some(rate) => pacer::spawn(Schedule::new(rate, workers), clock.start, clock.end)?
            .into_iter()
            .map(Pacing::OpenLoop)
            .collect(),
        None => (0..workers).map(|_| Pacing::ClosedLoop).collect(),
    };
    let handles: Vec<_> = pacing
        .into_iter()
        .enumerate()
        .map(|(worker, pacing)| tokio::spawn(work(Arc::clone(&scenario), worker, clock, pacing, plan.call_timeout)))
        .collect();
    let mut total = Stats::new()?;
    for handle in handles {
        let stats = handle.await.context("a worker task panicked")??;
        total.merge(&stats)?;
    }

    let finished = total.last_completion.map_or(clock.end, |last| last.max(clock.end));
    Ok(RunOutcome { measured: finished.saturating_duration_since(clock.measure_from), stats: total })
}

async fn work<S: Scenario>(
    scenario: Arc<S>,
    worker: usize,
    clock: Clock,
    mut pacing: Pacing,
    call_timeout: Duration,
) -> anyhow::Result<Stats> {
    let mut stats = Stats::new()?;
    for seq in 0_u64.. {
        let due = match pacing {
            Pacing::ClosedLoop => {
                let now = Instant::now();
                if now >= clock.end {
                    break;
                }
                now
            }
            Pacing::OpenLoop(ref mut releases) => {
                let Some(due) = releases.recv().await else { break };
                if Instant::now() >= clock.last_send {
                    // Still catching up after the window closed. Sending would stretch the run;
                    // skipping silently would hide that the target could not keep up.
                    if due >= clock.measure_from {
                        stats.unsent += 1;
                    }
                    continue;
                }
                due
            }
        };

        let sent = Instant::now();
        let outcome = match tokio::time::timeout(call_timeout, scenario.call(worker, seq)).await {
            Ok(result) => result.map_err(|status| status.code()),
            Err(_elapsed) => Err(Code::DeadlineExceeded),
        };
        let completed = Instant::now();
        stats.calls_made += 1;
        if due >= clock.measure_from {
            stats.record(
                outcome,
                completed.saturating_duration_since(due),
                sent.saturating_duration_since(due),
                completed,
            );
        }
    }
    Ok(stats)
}
