//! Analytics in memory, for `switchyard dev` and tests that need no Postgres.

use std::{collections::HashMap, sync::Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchyard_kit::{TenantId, store::StoreError};

use super::{
    AnalyticsStore, Correction, DecisionRecord, Feedback, RecordedTurn, RouteFigures, RoutingStats, Spend,
    StoredCorrection, percentile,
    stats::{KeySpend, sort_groups, sort_keys},
};
use crate::{cost::CallCost, route::Route};

#[derive(Default)]
pub struct MemoryAnalytics {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    decisions: HashMap<String, DecisionRecord>,
    feedback: HashMap<String, Feedback>,
    corrections: Vec<StoredCorrection>,
    last_correction: i64,
}

impl MemoryAnalytics {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn figures<'a>(
    decisions: impl Iterator<Item = &'a DecisionRecord> + Clone,
    feedback: &HashMap<String, Feedback>,
) -> RouteFigures {
    let mut routing: Vec<f64> = decisions.clone().map(|d| d.routing_ms as f64).collect();
    let mut execution: Vec<f64> = decisions.clone().map(|d| d.execution_ms as f64).collect();
    routing.sort_by(f64::total_cmp);
    execution.sort_by(f64::total_cmp);
    let mut figures = RouteFigures {
        count: routing.len() as u64,
        routing_p50_ms: percentile(&routing, 0.5),
        routing_p95_ms: percentile(&routing, 0.95),
        routing_p99_ms: percentile(&routing, 0.99),
        execution_p50_ms: percentile(&execution, 0.5),
        execution_p95_ms: percentile(&execution, 0.95),
        ..RouteFigures::default()
    };
    for decision in decisions {
        add_turn(&mut figures.spend, decision);
        if let Some(f) = feedback.get(&decision.id) {
            figures.feedback += 1;
            figures.helpful += u64::from(f.helpful);
            figures.misrouted += u64::from(f.expected_route.is_some_and(|r| r != decision.route));
        }
    }
    figures
}

/// The window's model calls grouped by `key`, in [`sort_groups`] order.
fn group<'a>(
    decisions: impl Iterator<Item = &'a DecisionRecord>,
    key: impl Fn(&CallCost) -> String,
) -> Vec<(String, Spend)> {
    let mut groups: HashMap<String, Spend> = HashMap::new();
    for part in decisions.flat_map(|d| &d.cost_parts) {
        groups.entry(key(part)).or_default().add_part(part);
    }
    let mut groups: Vec<(String, Spend)> = groups.into_iter().collect();
    sort_groups(&mut groups);
    groups
}

/// The window's turns grouped by API key, in [`sort_keys`] order.
fn keys<'a>(decisions: impl Iterator<Item = &'a DecisionRecord>) -> Vec<KeySpend> {
    let mut keys: HashMap<&str, KeySpend> = HashMap::new();
    for decision in decisions {
        let key_id = decision.key_id.as_deref().unwrap_or_default();
        let key = keys.entry(key_id).or_insert_with(|| KeySpend { key_id: key_id.to_owned(), ..KeySpend::default() });
        key.turns += 1;
        add_turn(&mut key.spend, decision);
    }
    let mut keys: Vec<KeySpend> = keys.into_values().collect();
    sort_keys(&mut keys);
    keys
}

#[async_trait]
impl AnalyticsStore for MemoryAnalytics {
    async fn record(&self, decisions: &[DecisionRecord]) -> Result<(), StoreError> {
        let mut state = self.state();
        for decision in decisions {
            state.decisions.entry(decision.id.clone()).or_insert_with(|| decision.clone());
        }
        Ok(())
    }

    async fn recorded_turn(&self, tenant: &TenantId, response_id: &str) -> Result<Option<RecordedTurn>, StoreError> {
        Ok(self.state().decisions.get(response_id).filter(|d| d.tenant == tenant.as_str()).map(|d| RecordedTurn {
            route: d.route,
            user: d.user.clone(),
            message: d.message.clone(),
        }))
    }

    async fn put_correction(&self, correction: &Correction) -> Result<i64, StoreError> {
        let mut state = self.state();
        // As in Postgres: a new judgement of the same answer replaces the old one, with a new id
        // so replicas that saw the old one load it again.
        state.corrections.retain(|c| c.correction.response_id != correction.response_id);
        state.last_correction += 1;
        let id = state.last_correction;
        state.corrections.push(StoredCorrection { id, correction: correction.clone() });
        Ok(id)
    }

    async fn corrections_after(&self, after: i64, limit: i64) -> Result<Vec<StoredCorrection>, StoreError> {
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        Ok(self.state().corrections.iter().filter(|c| c.id > after).take(limit).cloned().collect())
    }

    async fn put_feedback(&self, feedback: &Feedback) -> Result<(), StoreError> {
        self.state().feedback.insert(feedback.response_id.clone(), feedback.clone());
        Ok(())
    }

    async fn stats(
        &self,
        tenant: &TenantId,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<RoutingStats, StoreError> {
        let state = self.state();
        let window = state
            .decisions
            .values()
            .filter(|d| d.tenant == tenant.as_str() && d.occurred_at >= since && d.occurred_at < until);
        let mut stats = RoutingStats {
            total: window.clone().count() as u64,
            overall: figures(window.clone(), &state.feedback),
            cache_hits: window.clone().filter(|d| d.cache_hit).count() as u64,
            fallbacks: window.clone().filter(|d| d.fallback_used).count() as u64,
            degraded: window.clone().filter(|d| !d.degraded.is_empty()).count() as u64,
            client_tools: window.clone().filter(|d| d.client_tools).count() as u64,
            continuations: window.clone().filter(|d| d.continuation).count() as u64,
            held_switches: window.clone().filter(|d| d.held_switch_role_id.is_some()).count() as u64,
            routing_calls_avoided: window.clone().filter(|d| d.routing_call_avoided).count() as u64,
            routes: Vec::new(),
            models: group(window.clone(), |part| part.model.clone()),
            roles: group(window.clone(), |part| part.role_id.clone()),
            call_kinds: group(window.clone(), |part| part.kind.as_str().to_owned()),
            keys: keys(window.clone()),
        };
        for route in Route::ALL {
            let of_route = window.clone().filter(move |d| d.route == route);
            if of_route.clone().next().is_some() {
                stats.routes.push((route, figures(of_route, &state.feedback)));
            }
        }
        Ok(stats)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut state = self.state();
        let count = state.decisions.len();
        state.decisions.retain(|_, d| d.occurred_at >= before);
        state.feedback.retain(|_, f| f.submitted_at >= before);
        Ok((count - state.decisions.len()) as u64)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A whole turn's calls, tokens and cost added to `spend`.
fn add_turn(spend: &mut Spend, decision: &DecisionRecord) {
    spend.calls += decision.cost_parts.len() as u64;
    spend.prompt_tokens += u64::from(decision.prompt_tokens);
    spend.cached_prompt_tokens += u64::from(decision.cached_prompt_tokens);
    spend.completion_tokens += u64::from(decision.completion_tokens);
    spend.cost_nanousd += decision.cost_nanousd;
    spend.unpriced_calls += decision.cost_parts.iter().filter(|part| !part.priced).count() as u64;
}
