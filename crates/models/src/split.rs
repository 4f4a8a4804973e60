//! A single text's dense layers on two cores: the calling thread computes the first half of a
//! layer's output rows while one helper thread computes the second.
//!
//! Why: a query's pass is a chain of two dozen dense layers that each read a few megabytes of
//! weights; on a machine whose cores are shared with other work, one thread gets about half a
//! core, so the pass takes about twice its CPU time. With each layer halved across two threads
//! a query took 4.9 ms against 6.5 ms on one thread under two busy loops (criterion,
//! int8/avx2), and the MCP gateway's `set_context` +5.8 / +6.1 ms over `ping` against +10.0 /
//! +10.1 ms (docs/experiments/query-encoder.md, "set_context on two busy cores"). The price is the tail under that
//! load: when the scheduler is slow to run the helper, its caller waits (`set_context` p99
//! 9.7–83 ms over four runs, against 17–25 ms on one thread); on idle cores the two are alike.
//! `SWITCHYARD_QUERY_THREADS=1` keeps a query on its calling thread.
//!
//! Tried and dropped: letting the caller take the second half back when the helper has not
//! started it by the time the first is done (so it never waits for an unscheduled helper).
//! Under load the caller mostly took it back, and paid for waking the helper every layer:
//! 8.0–10.2 ms in criterion, slower than one thread (6.6–8.2 ms in the same runs).
//!
//! The hand-off is one wake-up per layer (rayon's worker, no spawning). Layers too small to pay
//! for it (fewer than [`MIN_PRODUCTS`] multiply-adds) stay on the calling thread. One helper
//! thread for the whole process, shared by every embedder: concurrent queries queue for it
//! briefly rather than each bringing threads of its own to two cores.

use std::ops::Range;
use std::sync::LazyLock;

/// Below this many multiply-adds a layer is computed on the calling thread alone.
const MIN_PRODUCTS: usize = 1 << 20;

/// `SWITCHYARD_QUERY_THREADS` (1 or 2): how many threads a single text's dense layers use.
/// The default is 2 on a machine with two or more cores, 1 otherwise.
pub fn threads_from_env() -> usize {
    match std::env::var("SWITCHYARD_QUERY_THREADS").as_deref() {
        Ok("1") => 1,
        _ if cores() < 2 => 1,
        _ => 2,
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

static HELPER: LazyLock<Option<rayon::ThreadPool>> = LazyLock::new(|| {
    rayon::ThreadPoolBuilder::new().num_threads(1).thread_name(|_| "embed-helper".to_owned()).build().ok()
});

/// Computes `work(rows, out)` for a layer of `rows` output rows over `tokens` tokens (`out` is
/// `(rows, tokens)`, row-major; `work` writes every value of the part it is given), each row a dot product of `columns` numbers: in two halves on
/// two threads when `threads` is 2 and the layer is large enough, else in one call. The split
/// falls on a multiple of `align` rows, so the kernels' row tiles stay whole.
pub fn rows<F>(threads: usize, rows: usize, tokens: usize, columns: usize, align: usize, out: &mut [f32], work: F)
where
    F: Fn(Range<usize>, &mut [f32]) + Sync,
{
    let split = rows / 2 / align * align;
    let helper = HELPER.as_ref().filter(|_| threads >= 2 && split > 0 && rows * tokens * columns >= MIN_PRODUCTS);
    let Some(helper) = helper else {
        return work(0..rows, out);
    };
    let (first, second) = out.split_at_mut(split * tokens);
    let work = &work;
    helper.in_place_scope(|scope| {
        scope.spawn(move |_| work(split..rows, second));
        work(0..split, first);
    });
}

#[cfg(test)]
mod tests {
    use super::rows;

    /// Every output row is written exactly once, by its own index, whichever way it is split.
    #[test]
    fn halves_cover_every_row_once() {
        for (count, tokens, columns) in [(1536, 12, 384), (1152, 3, 384), (7, 2, 384), (384, 1, 1)] {
            for threads in [1, 2] {
                let mut out = vec![-1.0f32; count * tokens];
                rows(threads, count, tokens, columns, 4, &mut out, |range, part| {
                    assert_eq!(part.len(), range.len() * tokens);
                    for (row, values) in range.zip(part.chunks_exact_mut(tokens)) {
                        values.iter_mut().for_each(|v| *v += 1.0 + row as f32);
                    }
                });
                for (row, values) in out.chunks_exact(tokens).enumerate() {
                    assert!(values.iter().all(|&v| v == row as f32), "{count}×{tokens} on {threads}: row {row}");
                }
            }
        }
    }
}
