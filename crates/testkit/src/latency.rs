//! Sequential latency sampling for the hdrhistogram benches: warm up, then time one call at a
//! time, each in whole microseconds (a sub-microsecond call counts as one, the histogram's floor).

use std::{future::Future, time::Instant};

use hdrhistogram::Histogram;

/// An empty histogram from 1 µs to 60 s, three significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Runs `op(i)` `warmup` times unrecorded, then `samples` times one after another, recording
/// each call's latency.
pub async fn sequential<F, Fut>(warmup: usize, samples: usize, mut op: F) -> Histogram<u64>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for i in 0..warmup {
        op(i).await;
    }
    let mut recorded = histogram();
    for i in 0..samples {
        let started = Instant::now();
        op(i).await;
        let _ = recorded.record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX).max(1));
    }
    recorded
}

/// Microseconds as milliseconds.
pub fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}
