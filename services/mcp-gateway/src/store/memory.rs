//! In-memory stores for `switchyard dev` and tests: the same behaviour as Redis and Postgres
//! (the behavioural suites run against both), nothing kept after exit.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use async_trait::async_trait;
use chrono::{DateTime, NaiveTime, Utc};
use switchyard_kit::partitions::Granularity;

use super::{ContextStore, SessionKey, StoreError, UsageStore};
use crate::{
    audit::{AuditQuery, AuditRecord},
    domain::{Counters, SessionContext, ShownMatch, UsagePair, UsageRecord, context_text},
};

#[derive(Default)]
struct Contexts {
    sessions: HashMap<SessionKey, SessionContext>,
    seen: HashSet<SessionKey>,
    transport: HashMap<String, String>,
    counters: Counters,
}

#[derive(Default)]
pub struct MemoryContextStore {
    inner: Mutex<Contexts>,
}

impl MemoryContextStore {
    fn with<T>(&self, f: impl FnOnce(&mut Contexts) -> T) -> T {
        let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }
}

fn count_session(contexts: &mut Contexts, key: &SessionKey) {
    if contexts.seen.insert(key.clone()) {
        contexts.counters.sessions += 1;
    }
}

#[async_trait]
impl ContextStore for MemoryContextStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<SessionContext>, StoreError> {
        Ok(self.with(|c| c.sessions.get(key).cloned()))
    }

    async fn touch(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.with(|c| count_session(c, key));
        Ok(())
    }

    async fn set_context(
        &self,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
        embedding: Option<&[f32]>,
        at: DateTime<Utc>,
    ) -> Result<SessionContext, StoreError> {
        Ok(self.with(|c| {
            count_session(c, key);
            let context = c.sessions.entry(key.clone()).or_default();
            if context.current_query.is_none() {
                c.counters.sessions_with_context += 1;
            }
            context.current_query = Some(query.to_owned());
            context.current_intent = intent.filter(|i| !i.is_empty()).map(str::to_owned);
            context.embedding = embedding.map(<[f32]>::to_vec);
            context.last_updated = Some(at);
            context.clone()
        }))
    }

    async fn record_shown(&self, key: &SessionKey, tools: &[String]) -> Result<(), StoreError> {
        self.with(|c| c.sessions.entry(key.clone()).or_default().shown = Some(tools.to_vec()));
        Ok(())
    }

    async fn record_call(&self, key: &SessionKey, tool: &str) -> Result<(ShownMatch, SessionContext), StoreError> {
        Ok(self.with(|c| {
            let context = c.sessions.entry(key.clone()).or_default();
            if !context.tools_used.iter().any(|t| t == tool) {
                context.tools_used.push(tool.to_owned());
            }
            let shown = match &context.shown {
                None => ShownMatch::NoList,
                Some(list) if list.iter().any(|t| t == tool) => ShownMatch::InList,
                Some(_) => ShownMatch::NotInList,
            };
            c.counters.tool_calls += 1;
            if shown != ShownMatch::NoList {
                c.counters.calls_after_filtered_list += 1;
            }
            if shown == ShownMatch::InList {
                c.counters.filtered_hits += 1;
            }
            (shown, context.clone())
        }))
    }

    async fn counters(&self) -> Result<Counters, StoreError> {
        Ok(self.with(|c| c.counters))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn load_transport(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.with(|c| c.transport.get(session_id).cloned()))
    }

    async fn store_transport(&self, session_id: &str, state: &str) -> Result<(), StoreError> {
        self.with(|c| c.transport.insert(session_id.to_owned(), state.to_owned()));
        Ok(())
    }

    async fn delete_transport(&self, session_id: &str) -> Result<(), StoreError> {
        self.with(|c| c.transport.remove(session_id));
        Ok(())
    }

    async fn end_session(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.with(|c| c.sessions.remove(key));
        Ok(())
    }
}

/// Records in arrival order.
#[derive(Default)]
pub struct MemoryUsageStore {
    records: Mutex<Vec<UsageRecord>>,
}

impl MemoryUsageStore {
    fn with<T>(&self, f: impl FnOnce(&mut Vec<UsageRecord>) -> T) -> T {
        let mut guard = self.records.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }
}

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn record(&self, records: &[UsageRecord]) -> Result<(), StoreError> {
        self.with(|all| all.extend_from_slice(records));
        Ok(())
    }

    async fn history(&self, limit: usize) -> Result<Vec<UsagePair>, StoreError> {
        Ok(self.with(|all| {
            all.iter()
                .rev()
                .filter_map(|record| match record {
                    UsageRecord::ToolCall {
                        tool,
                        context_query: Some(query),
                        context_intent,
                        context_embedding,
                        is_error: false,
                        ..
                    } => Some(UsagePair {
                        context: context_text(query, context_intent.as_deref()),
                        tool: tool.clone(),
                        embedding: context_embedding.clone(),
                    }),
                    _ => None,
                })
                .take(limit)
                .collect()
        }))
    }

    async fn session_records(&self, key: &SessionKey, limit: usize) -> Result<Vec<UsageRecord>, StoreError> {
        Ok(self.with(|all| {
            all.iter()
                .rev()
                .filter(|record| match record {
                    UsageRecord::SetContext { key: k, .. } | UsageRecord::ToolCall { key: k, .. } => k == key,
                    UsageRecord::Audit(_) => false,
                })
                .take(limit)
                .cloned()
                .collect()
        }))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.with(|all| {
            let mut found: Vec<AuditRecord> = all
                .iter()
                .filter_map(|record| match record {
                    UsageRecord::Audit(audit) if query.matches(audit) && query.after_cursor(audit) => {
                        Some((**audit).clone())
                    }
                    _ => None,
                })
                .collect();
            found.sort_by_key(|r| std::cmp::Reverse((r.at, r.id)));
            found.truncate(query.limit);
            found
        }))
    }

    async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        Ok(self.with(|all| {
            let was = all.len();
            all.retain(|record| !matches!(record, UsageRecord::Audit(audit) if audit.at < before));
            (was - all.len()) as u64
        }))
    }

    async fn keep_usage(&self, cut: Option<DateTime<Utc>>) -> Result<u64, StoreError> {
        let Some(cut) = cut else { return Ok(0) };
        // Whole months, as Postgres drops them.
        let boundary = Granularity::Month.start_of(cut.date_naive()).and_time(NaiveTime::MIN).and_utc();
        Ok(self.with(|all| {
            let was = all.len();
            all.retain(|record| match record {
                UsageRecord::SetContext { at, .. } | UsageRecord::ToolCall { at, .. } => *at >= boundary,
                UsageRecord::Audit(_) => true,
            });
            (was - all.len()) as u64
        }))
    }
}
