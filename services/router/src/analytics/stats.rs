//! The figures GetRoutingStats returns, and how the in-memory store computes them (Postgres
//! computes the same in SQL: `percentile_cont`, i.e. linear interpolation between ranks).

use crate::route::Route;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteFigures {
    pub count: u64,
    pub routing_p50_ms: f64,
    pub routing_p95_ms: f64,
    pub routing_p99_ms: f64,
    pub execution_p50_ms: f64,
    pub execution_p95_ms: f64,
    pub feedback: u64,
    pub helpful: u64,
    /// Feedback naming another route as the right one.
    pub misrouted: u64,
    /// The turns' model calls, tokens and cost.
    pub spend: Spend,
}

/// Model calls, their tokens and what they cost, summed exactly (nano-dollars).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_nanousd: i64,
    /// Calls of models without a price (counted as 0).
    pub unpriced_calls: u64,
}

impl Spend {
    pub fn add_part(&mut self, part: &crate::cost::CallCost) {
        self.calls += 1;
        self.prompt_tokens += u64::from(part.prompt_tokens);
        self.cached_prompt_tokens += u64::from(part.cached_prompt_tokens);
        self.completion_tokens += u64::from(part.completion_tokens);
        self.cost_nanousd += part.cost_nanousd;
        self.unpriced_calls += u64::from(!part.priced);
    }

    /// The mean cost of one call, in nano-dollars (0 without calls).
    pub fn per_call_nanousd(&self) -> f64 {
        if self.calls == 0 { 0.0 } else { self.cost_nanousd as f64 / self.calls as f64 }
    }
}

/// Spend grouped by one key (a model, a role, a kind of call), costliest first, then by key:
/// the order both stores give.
pub fn sort_groups(groups: &mut [(String, Spend)]) {
    groups.sort_by(|(a_key, a), (b_key, b)| b.cost_nanousd.cmp(&a.cost_nanousd).then_with(|| a_key.cmp(b_key)));
}

/// The turns of one API key over the window, and their spend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySpend {
    /// The key's id; empty for the turns that came without one (a JWT, or no credential).
    pub key_id: String,
    pub turns: u64,
    pub spend: Spend,
}

/// Keys costliest first, then by id: the order both stores give.
pub fn sort_keys(keys: &mut [KeySpend]) {
    keys.sort_by(|a, b| b.spend.cost_nanousd.cmp(&a.spend.cost_nanousd).then_with(|| a.key_id.cmp(&b.key_id)));
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutingStats {
    pub total: u64,
    /// Figures per route, for the routes that occurred in the window.
    pub routes: Vec<(Route, RouteFigures)>,
    /// The same over all routes.
    pub overall: RouteFigures,
    pub cache_hits: u64,
    pub fallbacks: u64,
    pub degraded: u64,
    /// Turns with the caller's own tools.
    pub client_tools: u64,
    /// Turns that continued a tool loop.
    pub continuations: u64,
    /// Role switches held back inside a tool loop.
    pub held_switches: u64,
    /// Spend per model, per role and per kind of call (see [`sort_groups`] for the order).
    pub models: Vec<(String, Spend)>,
    pub roles: Vec<(String, Spend)>,
    pub call_kinds: Vec<(String, Spend)>,
    /// Turns and spend per API key (see [`sort_keys`] for the order).
    pub keys: Vec<KeySpend>,
    /// Turns decided without a routing call (cache hit, fast router).
    pub routing_calls_avoided: u64,
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

impl RouteFigures {
    pub fn satisfaction(&self) -> f64 {
        ratio(self.helpful, self.feedback)
    }

    pub fn false_routing_rate(&self) -> f64 {
        ratio(self.misrouted, self.feedback)
    }
}

impl RoutingStats {
    pub fn share(&self, figures: &RouteFigures) -> f64 {
        ratio(figures.count, self.total)
    }

    pub fn cache_hit_rate(&self) -> f64 {
        ratio(self.cache_hits, self.total)
    }

    pub fn fallback_rate(&self) -> f64 {
        ratio(self.fallbacks, self.total)
    }

    pub fn degraded_rate(&self) -> f64 {
        ratio(self.degraded, self.total)
    }

    /// The mean cost of a routing call over the window, in nano-dollars.
    pub fn routing_call_nanousd(&self) -> f64 {
        self.call_kinds
            .iter()
            .find(|(kind, _)| kind == crate::cost::CallKind::Routing.as_str())
            .map_or(0.0, |(_, spend)| spend.per_call_nanousd())
    }

    /// What the routing cache and the fast router saved: routing calls avoided × the mean cost
    /// of a routing call, in nano-dollars.
    pub fn routing_savings_nanousd(&self) -> f64 {
        self.routing_calls_avoided as f64 * self.routing_call_nanousd()
    }
}

/// The `p`-quantile (0 to 1) of sorted values, interpolating linearly between ranks as
/// Postgres's `percentile_cont` does; 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = p.clamp(0.0, 1.0) * (n - 1) as f64;
            let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
            sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_percentile_cont() {
        let values = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&values, 0.5), 25.0);
        assert_eq!(percentile(&values, 0.0), 10.0);
        assert_eq!(percentile(&values, 1.0), 40.0);
        assert!((percentile(&values, 0.95) - 38.5).abs() < 1e-9);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
