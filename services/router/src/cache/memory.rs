//! Exact decisions in process (one replica, `switchyard dev`, tests): bounded across all
//! tenants together, expired entries dropped when read or when room is needed.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use switchyard_kit::store::StoreError;

use super::{CachedRoute, DecisionStore, lock};

pub struct MemoryDecisions {
    entries: Mutex<HashMap<String, (CachedRoute, Instant)>>,
    /// Entries kept at most, all tenants together.
    budget: usize,
}

impl MemoryDecisions {
    pub fn new(budget: usize) -> Self {
        Self { entries: Mutex::default(), budget: budget.max(1) }
    }

    fn key(tenant: &str, normalized: &str) -> String {
        format!("{tenant}\u{0}{normalized}")
    }
}

#[async_trait]
impl DecisionStore for MemoryDecisions {
    async fn get(&self, tenant: &str, normalized: &str) -> Result<Option<CachedRoute>, StoreError> {
        let mut entries = lock(&self.entries);
        let key = Self::key(tenant, normalized);
        Ok(match entries.get(&key) {
            Some((cached, expires)) if *expires > Instant::now() => Some(cached.clone()),
            Some(_) => {
                entries.remove(&key);
                None
            }
            None => None,
        })
    }

    async fn put(&self, tenant: &str, normalized: &str, cached: &CachedRoute, ttl: Duration) -> Result<(), StoreError> {
        let mut entries = lock(&self.entries);
        if entries.len() >= self.budget {
            let now = Instant::now();
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= self.budget {
                entries.clear();
            }
        }
        entries.insert(Self::key(tenant, normalized), (cached.clone(), Instant::now() + ttl));
        Ok(())
    }

    async fn forget(&self, tenant: &str, normalized: &str) -> Result<(), StoreError> {
        lock(&self.entries).remove(&Self::key(tenant, normalized));
        Ok(())
    }
}
