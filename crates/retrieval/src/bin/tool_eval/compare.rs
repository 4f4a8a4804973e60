//! Per-query figures: the rank each query's true tool gets, recall and MRR over those ranks,
//! and how a method with history moves each query against cold start. A mean gain can hide
//! queries the history made worse; these count them.

use serde_json::{Value, json};

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// recall@1/5/10 and MRR from the true tool's rank per query (1 is the best).
pub fn summary(ranks: &[usize]) -> Value {
    let n = ranks.len().max(1) as f64;
    let within = |k: usize| ranks.iter().filter(|r| **r <= k).count() as f64 / n;
    let reciprocal: f64 = ranks.iter().map(|r| 1.0 / *r as f64).sum();
    json!({
        "recall@1": round(within(1)),
        "recall@5": round(within(5)),
        "recall@10": round(within(10)),
        "mrr": round(reciprocal / n),
    })
}

/// How `ranks` moves each query against `baseline` (both by query, same order): how many got
/// better or worse, which crossed the top-5 / top-1 line either way, and by how many places the
/// worse ones fell (mean over the worse queries, and the worst).
pub fn against(baseline: &[usize], ranks: &[usize]) -> Value {
    let pairs = || baseline.iter().zip(ranks).map(|(b, r)| (*b, *r));
    let count = |keep: &dyn Fn(usize, usize) -> bool| pairs().filter(|(b, r)| keep(*b, *r)).count();
    let losses: Vec<usize> = pairs().filter(|(b, r)| r > b).map(|(b, r)| r - b).collect();
    let gains: Vec<usize> = pairs().filter(|(b, r)| r < b).map(|(b, r)| b - r).collect();
    let mean = |values: &[usize]| {
        if values.is_empty() { 0.0 } else { round(values.iter().sum::<usize>() as f64 / values.len() as f64) }
    };
    json!({
        "better": gains.len(),
        "worse": losses.len(),
        "unchanged": count(&|b, r| b == r),
        "fell_out_of_top5": count(&|b, r| b <= 5 && r > 5),
        "fell_out_of_top1": count(&|b, r| b == 1 && r > 1),
        "entered_top5": count(&|b, r| b > 5 && r <= 5),
        "entered_top1": count(&|b, r| b > 1 && r == 1),
        "mean_rank_loss": mean(&losses),
        "worst_rank_loss": losses.iter().copied().max().unwrap_or(0),
        "mean_rank_gain": mean(&gains),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_query_that_moved() {
        // Query 1 falls 1 → 7, query 2 rises 9 → 1, query 3 slips 2 → 3, query 4 stays.
        let moved = against(&[1, 9, 2, 4], &[7, 1, 3, 4]);
        assert_eq!(moved["better"], 1);
        assert_eq!(moved["worse"], 2);
        assert_eq!(moved["unchanged"], 1);
        assert_eq!(moved["fell_out_of_top5"], 1);
        assert_eq!(moved["fell_out_of_top1"], 1);
        assert_eq!(moved["entered_top5"], 1);
        assert_eq!(moved["entered_top1"], 1);
        assert_eq!(moved["mean_rank_loss"], 3.5);
        assert_eq!(moved["worst_rank_loss"], 6);
        assert_eq!(moved["mean_rank_gain"], 8.0);
        let figures = summary(&[1, 9, 2, 4]);
        assert_eq!((figures["recall@1"].as_f64(), figures["recall@5"].as_f64()), (Some(0.25), Some(0.75)));
    }
}
