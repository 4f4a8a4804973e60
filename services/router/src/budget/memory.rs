//! Budgets and spend counters in process (one replica, `switchyard dev`, tests). Nothing is
//! lost but by a restart, which loses the budgets too.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchyard_kit::{TenantId, store::StoreError};

use super::{Budget, BudgetBook, SpendCounters};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Default)]
pub struct MemoryBudgetBook {
    budgets: Mutex<BTreeMap<(String, String, String), Budget>>,
}

#[async_trait]
impl BudgetBook for MemoryBudgetBook {
    async fn put(&self, budget: &Budget) -> Result<(), StoreError> {
        let id = (budget.tenant.as_str().to_owned(), budget.key_id.clone(), budget.user_id.clone());
        lock(&self.budgets).insert(id, budget.clone());
        Ok(())
    }

    async fn delete(&self, tenant: &TenantId, key_id: &str, user_id: &str) -> Result<bool, StoreError> {
        let id = (tenant.as_str().to_owned(), key_id.to_owned(), user_id.to_owned());
        Ok(lock(&self.budgets).remove(&id).is_some())
    }

    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<Budget>, StoreError> {
        Ok(lock(&self.budgets)
            .values()
            .filter(|budget| tenant.is_none_or(|tenant| budget.tenant == *tenant))
            .cloned()
            .collect())
    }

    /// Memory counters are never lost while the budgets last, so there is nothing to rebuild.
    async fn recorded_spend(
        &self,
        _tenant: &TenantId,
        _key_id: &str,
        _user_id: &str,
        _since: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        Ok(0)
    }
}

#[derive(Default)]
pub struct MemorySpendCounters {
    counters: Mutex<HashMap<(String, String), (i64, Instant)>>,
}

impl MemorySpendCounters {
    fn key(tenant: &TenantId, counter: &str) -> (String, String) {
        (tenant.as_str().to_owned(), counter.to_owned())
    }
}

#[async_trait]
impl SpendCounters for MemorySpendCounters {
    async fn read(&self, tenant: &TenantId, counters: &[String]) -> Result<Vec<Option<i64>>, StoreError> {
        let now = Instant::now();
        let mut held = lock(&self.counters);
        held.retain(|_, (_, expires)| *expires > now);
        Ok(counters.iter().map(|counter| held.get(&Self::key(tenant, counter)).map(|(n, _)| *n)).collect())
    }

    async fn seed(&self, tenant: &TenantId, counter: &str, nanos: i64, ttl: Duration) -> Result<i64, StoreError> {
        let mut held = lock(&self.counters);
        let (value, _) = *held.entry(Self::key(tenant, counter)).or_insert((nanos, Instant::now() + ttl));
        Ok(value)
    }

    async fn add(&self, tenant: &TenantId, counters: &[String], nanos: i64) -> Result<Vec<Option<i64>>, StoreError> {
        let mut held = lock(&self.counters);
        Ok(counters
            .iter()
            .map(|counter| {
                held.get_mut(&Self::key(tenant, counter)).map(|(value, _)| {
                    *value += nanos;
                    *value
                })
            })
            .collect())
    }
}
