//! Hourly rollups of decisions (migration 0011): what a batch of newly stored decisions adds to
//! each tenant's hour, the latency histograms those hours keep, and how a stats window splits
//! into whole hours (read from the rollups) and partial edge hours (read from the decisions).
//!
//! A latency histogram counts milliseconds by bucket: below 128 ms one bucket per millisecond;
//! above, 64 buckets per power of two, so a bucket's midpoint is within 1/128 of any value in
//! it. `routing_latency_bucket` in the migration is the same function in SQL.

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use super::{DecisionRecord, Spend};

/// Milliseconds below this have a bucket each.
const EXACT_BELOW: u32 = 128;
/// Buckets per power of two above [`EXACT_BELOW`].
const SUB_BUCKETS: u32 = 64;

/// The histogram bucket of a latency in milliseconds (negative counts as 0).
pub fn latency_bucket(ms: i64) -> usize {
    let ms = u32::try_from(ms.clamp(0, i64::from(i32::MAX))).unwrap_or(0);
    if ms < EXACT_BELOW {
        return ms as usize;
    }
    let high = 31 - ms.leading_zeros(); // 7 for 128..=255
    (EXACT_BELOW + (high - 7) * SUB_BUCKETS + ((ms >> (high - 6)) & (SUB_BUCKETS - 1))) as usize
}

/// The value a bucket stands for: itself below [`EXACT_BELOW`], else the midpoint of the whole
/// milliseconds it holds.
pub fn bucket_value(bucket: usize) -> f64 {
    let bucket = bucket as u64;
    let exact = u64::from(EXACT_BELOW);
    if bucket < exact {
        return bucket as f64;
    }
    let (octave, sub) = ((bucket - exact) / u64::from(SUB_BUCKETS), (bucket - exact) % u64::from(SUB_BUCKETS));
    let shift = octave + 1; // bucket width 2^shift
    let low = (u64::from(SUB_BUCKETS) + sub) << shift;
    low as f64 + ((1u64 << shift) - 1) as f64 / 2.0
}

/// Adds `other` into `into` bucket by bucket.
pub fn add_histogram(into: &mut Vec<u64>, other: &[u64]) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (slot, count) in into.iter_mut().zip(other) {
        *slot += count;
    }
}

/// Latencies of a window: exact values where they were read from the decisions, histogram
/// buckets where they came from the rollups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latencies {
    pub exact: BTreeMap<i64, u64>,
    pub histogram: Vec<u64>,
}

impl Latencies {
    pub fn merge(&mut self, other: &Latencies) {
        for (value, count) in &other.exact {
            *self.exact.entry(*value).or_default() += count;
        }
        add_histogram(&mut self.histogram, &other.histogram);
    }

    /// The `p`-quantile, interpolating between ranks as `percentile_cont` does: exact when
    /// every value was read from the decisions, else from the buckets (the exact values put in
    /// theirs); 0 without values.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.histogram.iter().all(|&count| count == 0) {
            return quantile(self.exact.iter().map(|(value, count)| (*value as f64, *count)), p);
        }
        let mut buckets = self.histogram.clone();
        for (value, count) in &self.exact {
            let bucket = latency_bucket(*value);
            if buckets.len() <= bucket {
                buckets.resize(bucket + 1, 0);
            }
            buckets[bucket] += count;
        }
        quantile(buckets.iter().enumerate().map(|(bucket, count)| (bucket_value(bucket), *count)), p)
    }
}

/// `percentile_cont` over (value, count) pairs in ascending value order.
fn quantile(values: impl Iterator<Item = (f64, u64)> + Clone, p: f64) -> f64 {
    let total: u64 = values.clone().map(|(_, count)| count).sum();
    if total == 0 {
        return 0.0;
    }
    let rank = p.clamp(0.0, 1.0) * (total - 1) as f64;
    let (low, high) = (rank.floor() as u64, rank.ceil() as u64);
    let at = |index: u64| {
        let mut seen = 0;
        for (value, count) in values.clone() {
            seen += count;
            if seen > index {
                return value;
            }
        }
        0.0
    };
    let (low_value, high_value) = (at(low), at(high));
    low_value + (high_value - low_value) * (rank - low as f64)
}

/// The start of the hour `at` falls in.
pub fn hour_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(TimeDelta::hours(1)).unwrap_or(at)
}

/// How a window `[since, until)` is read: `hours` (whole hours, from the rollups) and the
/// `edges` before and after them (from the decisions). Without a whole hour in it, the window
/// is one edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPlan {
    pub hours: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub edges: [(DateTime<Utc>, DateTime<Utc>); 2],
}

impl WindowPlan {
    pub fn of(since: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        let first = hour_of(since);
        let first = if first < since { first + TimeDelta::hours(1) } else { first };
        let last = hour_of(until);
        if first < last {
            Self { hours: Some((first, last)), edges: [(since, first), (last, until)] }
        } else {
            Self { hours: None, edges: [(since, until), (until, until)] }
        }
    }
}

/// What stored decisions add to one tenant's hour on one route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteHour {
    pub turns: i64,
    pub cache_hits: i64,
    pub fallbacks: i64,
    pub degraded: i64,
    pub client_tools: i64,
    pub continuations: i64,
    pub held_switches: i64,
    pub routing_calls_avoided: i64,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub cached_prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_nanousd: i64,
    pub unpriced_calls: i64,
    pub routing_ms: Vec<u64>,
    pub execution_ms: Vec<u64>,
}

/// What stored decisions add to one tenant's hour under one model, role, kind of call or key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpendHour {
    pub turns: i64,
    pub spend: Spend,
}

/// The rollup rows a batch of decisions adds to, keyed and ordered as the tables are (so
/// writers at once lock rows in the same order).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RollupDelta {
    pub routes: BTreeMap<(String, DateTime<Utc>, &'static str), RouteHour>,
    pub spend: BTreeMap<(String, DateTime<Utc>, &'static str, String), SpendHour>,
}

/// Stored as Postgres stores it (integers clamped as the decision's columns are).
fn column(value: impl TryInto<i32>) -> i64 {
    i64::from(value.try_into().unwrap_or(i32::MAX))
}

impl RollupDelta {
    pub fn add(&mut self, d: &DecisionRecord) {
        let hour = hour_of(d.occurred_at);
        let unpriced = column(d.cost_parts.iter().filter(|part| !part.priced).count());
        let calls = d.cost_parts.len() as i64;
        let (prompt, cached, completion) =
            (column(d.prompt_tokens), column(d.cached_prompt_tokens), column(d.completion_tokens));
        let row = self.routes.entry((d.tenant.clone(), hour, d.route.as_str())).or_default();
        row.turns += 1;
        row.cache_hits += i64::from(d.cache_hit);
        row.fallbacks += i64::from(d.fallback_used);
        row.degraded += i64::from(!d.degraded.is_empty());
        row.client_tools += i64::from(d.client_tools);
        row.continuations += i64::from(d.continuation);
        row.held_switches += i64::from(d.held_switch_role_id.is_some());
        row.routing_calls_avoided += i64::from(d.routing_call_avoided);
        row.calls += calls;
        row.prompt_tokens += prompt;
        row.cached_prompt_tokens += cached;
        row.completion_tokens += completion;
        row.cost_nanousd += d.cost_nanousd;
        row.unpriced_calls += unpriced;
        for (histogram, ms) in [(&mut row.routing_ms, d.routing_ms), (&mut row.execution_ms, d.execution_ms)] {
            let bucket = latency_bucket(column(ms));
            if histogram.len() <= bucket {
                histogram.resize(bucket + 1, 0);
            }
            histogram[bucket] += 1;
        }

        let key = self.spend.entry((d.tenant.clone(), hour, "key", d.key_id.clone().unwrap_or_default())).or_default();
        key.turns += 1;
        key.spend.calls += calls as u64;
        key.spend.prompt_tokens += prompt as u64;
        key.spend.cached_prompt_tokens += cached as u64;
        key.spend.completion_tokens += completion as u64;
        key.spend.cost_nanousd += d.cost_nanousd;
        key.spend.unpriced_calls += unpriced as u64;
        for part in &d.cost_parts {
            for (dimension, name) in [("model", &part.model), ("role", &part.role_id)] {
                self.spend.entry((d.tenant.clone(), hour, dimension, name.clone())).or_default().spend.add_part(part);
            }
            let kind = part.kind.as_str().to_owned();
            self.spend.entry((d.tenant.clone(), hour, "kind", kind)).or_default().spend.add_part(part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_128_and_within_1_in_128_above() {
        assert_eq!((0..128).map(latency_bucket).collect::<Vec<_>>(), (0..128).collect::<Vec<_>>());
        assert_eq!(latency_bucket(-4), 0);
        assert_eq!([128, 129, 255, 256, 1000].map(latency_bucket), [128, 128, 191, 192, 317]);
        assert_eq!(latency_bucket(i64::MAX), 1663);
        for ms in (0..200_000).chain([i64::from(i32::MAX)]) {
            let value = bucket_value(latency_bucket(ms));
            assert!((value - ms as f64).abs() <= ms as f64 / 128.0, "{ms} in a bucket standing for {value}");
        }
        // Buckets are in value order.
        assert!((1..1664).all(|b| bucket_value(b) > bucket_value(b - 1)));
    }

    #[test]
    fn exact_values_give_percentile_cont_and_buckets_approach_it() {
        let exact = Latencies { exact: [(10, 1), (20, 1), (30, 1), (40, 1)].into(), histogram: Vec::new() };
        assert_eq!(exact.percentile(0.5), 25.0);
        assert!((exact.percentile(0.95) - 38.5).abs() < 1e-9);
        assert_eq!(Latencies::default().percentile(0.5), 0.0);
        let mut mixed = exact.clone();
        mixed.histogram = vec![0; 11];
        mixed.histogram[10] = 1;
        assert_eq!(mixed.percentile(0.0), 10.0);
        assert_eq!(mixed.percentile(0.5), 20.0, "10, 10, 20, 30, 40");
    }

    #[test]
    fn windows_split_into_whole_hours_and_edges() {
        let at = |h: u32, m: u32| chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 11, 1, h, m, 0).single().unwrap();
        let plan = WindowPlan::of(at(9, 30), at(12, 15));
        assert_eq!(plan.hours, Some((at(10, 0), at(12, 0))));
        assert_eq!(plan.edges, [(at(9, 30), at(10, 0)), (at(12, 0), at(12, 15))]);
        let aligned = WindowPlan::of(at(9, 0), at(11, 0));
        assert_eq!(aligned.hours, Some((at(9, 0), at(11, 0))));
        assert_eq!(aligned.edges, [(at(9, 0), at(9, 0)), (at(11, 0), at(11, 0))]);
        let short = WindowPlan::of(at(9, 10), at(10, 50));
        assert_eq!(short.hours, None);
        assert_eq!(short.edges[0], (at(9, 10), at(10, 50)));
    }
}
