//! Releases open-loop requests to their workers at the scheduled times.
//!
//! The pacing runs on its own OS thread rather than on tokio timers: tokio's timer has a
//! granularity of one millisecond, which made every request start ~1 ms late, and since
//! latency is measured from the scheduled time, that lag would swamp the latency of a
//! sub-millisecond service. A thread sleeping on the OS clock is late by tens of microseconds.

use std::time::Instant;

use anyhow::Context;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::schedule::Schedule;

/// Starts the pacer for a run that begins at `start` and stops scheduling at `end`. Returns one
/// receiver per worker of the schedule, yielding the due time of each of that worker's requests
/// in order, and closing once the schedule is past `end`.
///
/// A busy worker finds its releases queued up when it gets back: it then sends them late, and
/// that wait counts in their latency.
pub fn spawn(schedule: Schedule, start: Instant, end: Instant) -> anyhow::Result<Vec<UnboundedReceiver<Instant>>> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..schedule.workers()).map(|_| unbounded_channel()).unzip();
    // Detached: it ends by itself when the schedule passes `end` or every worker is gone.
    std::thread::Builder::new()
        .name("loadgen-pacer".to_owned())
        .spawn(move || release(schedule, &senders, start, end))
        .context("starting the pacer thread")?;
    Ok(receivers)
}

fn release(schedule: Schedule, senders: &[UnboundedSender<Instant>], start: Instant, end: Instant) {
    for index in 0_u64.. {
        let due = start + schedule.due(index);
        if due >= end {
            return;
        }
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let Some(sender) = senders.get(schedule.worker(index)) else { return };
        if sender.send(due).is_err() {
            return; // the worker is gone: the run was abandoned
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn each_worker_receives_its_due_times_in_order_then_closes() {
        let start = Instant::now();
        let schedule = Schedule::new(1000.0, 2);
        let mut receivers = spawn(schedule, start, start + Duration::from_millis(6)).unwrap();
        let mut worker_1 = Vec::new();
        while let Some(due) = receivers[1].recv().await {
            assert!(Instant::now() >= due, "released before it was due");
            worker_1.push(due - start);
        }
        assert_eq!(worker_1, [1, 3, 5].map(Duration::from_millis));
        let mut worker_0 = 0;
        while receivers[0].recv().await.is_some() {
            worker_0 += 1;
        }
        assert_eq!(worker_0, 3);
    }
}
