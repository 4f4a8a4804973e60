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
