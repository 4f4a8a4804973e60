//! The routing cache and user preferences (docs/requirements.md#router-future-enhancements):
//! routing decisions for messages seen before, so a hit skips the routing call; and users' corrections, so a user who
//! said "this should have used tools" gets that route for similar messages from then on.
//!
//! Three lookups, in this order, each scoped so nothing crosses tenants:
//! 1. the user's corrections, by embedding similarity (every replica holds all corrections,
//!    loaded from the analytics store and refreshed — see [`Learning`]);
//! 2. the tenant's decisions by exact message, in Redis (shared by replicas, with a TTL) or in
//!    memory without Redis;
//! 3. the tenant's decisions by embedding similarity, in process (bounded per tenant, and the
//!    number of tenants bounded, least recently used out first).
//!
//! Messages are compared normalized (trimmed, lower case, whitespace collapsed). The exact
//! lookup's backends are [`DecisionStore`]s, one file each: [`redis`] and [`memory`].

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchyard_kit::store::{KeyPrefix, RedisConnection, StoreError};

use crate::{
    analytics::{AnalyticsStore, Correction},
    fast::FastPath,
    route::{Decision, Route},
};

pub mod memory;
pub mod redis;

/// Settings of the cache (see `RouterConfig`).
#[derive(Debug, Clone, Copy)]
pub struct CacheSettings {
    /// Cosine similarity from which a cached decision (or a correction) applies.
    pub similarity: f32,
    pub ttl: Duration,
    /// Decisions kept in process per tenant for similarity lookups.
    pub entries_per_tenant: usize,
    /// Tenants whose decisions are kept in process.
    pub tenants: usize,
    /// Corrections kept per user (the newest win).
    pub corrections_per_user: usize,
}

impl CacheSettings {
    /// Corrections kept per user unless set otherwise (no flag sets it).
    pub const CORRECTIONS_PER_USER: usize = 256;
}

impl Default for CacheSettings {
    /// The flags' defaults.
    fn default() -> Self {
        crate::RouterConfig::defaults().cache_settings()
    }
}

/// A routing decision as cached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedRoute {
    pub route: Route,
    pub reasoning: String,
    pub domains: Vec<String>,
}

impl CachedRoute {
    pub fn of(decision: &Decision) -> Self {
        Self { route: decision.route, reasoning: decision.reasoning.clone(), domains: decision.domains.clone() }
    }

    pub fn decision(&self) -> Decision {
        Decision {
            route: self.route,
            reasoning: self.reasoning.clone(),
            domains: self.domains.clone(),
            malformed_arguments: None,
        }
    }
}

/// Why a lookup hit.
#[derive(Debug, Clone, PartialEq)]
pub enum HitKind {
    /// The user corrected a similar message to this route.
    Correction {
        similarity: f32,
        message: String,
    },
    Exact,
    Similar {
        similarity: f32,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub cached: CachedRoute,
    pub kind: HitKind,
}

impl Hit {
    /// The reasoning reported for a cached route.
    pub fn reasoning(&self) -> String {
        match &self.kind {
            HitKind::Correction { similarity, message } => format!(
                "learned from your correction of a similar message ({similarity:.2} similar): \"{}\"",
                clip(message, 120)
            ),
            HitKind::Exact => self.with_reasoning("cached decision for the same message".to_owned()),
            HitKind::Similar { similarity } => {
                self.with_reasoning(format!("cached decision for a similar message ({similarity:.2} similar)"))
            }
        }
    }

    /// `why`, then the cached decision's own reasoning when it has one (a direct answer has none).
    fn with_reasoning(&self, why: String) -> String {
        if self.cached.reasoning.is_empty() { why } else { format!("{why}: {}", self.cached.reasoning) }
    }
}

fn clip(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// A message as the cache compares it.
pub fn normalize(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Where the tenants' decisions by exact (normalized) message live. An entry is the tenant's
/// alone, gone after its TTL, and gone at once when forgotten.
#[async_trait]
pub trait DecisionStore: Send + Sync {
    async fn get(&self, tenant: &str, normalized: &str) -> Result<Option<CachedRoute>, StoreError>;
    async fn put(&self, tenant: &str, normalized: &str, cached: &CachedRoute, ttl: Duration) -> Result<(), StoreError>;
    async fn forget(&self, tenant: &str, normalized: &str) -> Result<(), StoreError>;
}

/// One tenant's in-process decisions, oldest first.
#[derive(Default)]
struct TenantEntries {
    entries: VecDeque<(String, Vec<f32>, CachedRoute)>,
    last_used: u64,
}

/// One correction in process.
struct Learned {
    message: String,
    vector: Vec<f32>,
    route: Route,
    response_id: String,
}

pub struct RoutingCache {
    settings: CacheSettings,
    exact: Box<dyn DecisionStore>,
    similar: Mutex<Similar>,
    corrections: Mutex<HashMap<(String, String), Vec<Learned>>>,
}

#[derive(Default)]
struct Similar {
    tenants: HashMap<String, TenantEntries>,
    clock: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl RoutingCache {
    /// Exact decisions in Redis (one Redis or a Redis Cluster) under `prefix`.
    pub fn redis(settings: CacheSettings, conn: RedisConnection, prefix: KeyPrefix) -> Self {
        Self::with_store(settings, Box::new(redis::RedisDecisions::new(conn, prefix)))
    }

    /// Exact decisions in process (one replica, `switchyard dev`, tests), bounded like the
    /// similarity entries: all tenants together.
    pub fn memory(settings: CacheSettings) -> Self {
        let budget = settings.entries_per_tenant.saturating_mul(settings.tenants);
        Self::with_store(settings, Box::new(memory::MemoryDecisions::new(budget)))
    }

    /// Exact decisions in `exact`.
    pub fn with_store(settings: CacheSettings, exact: Box<dyn DecisionStore>) -> Self {
        Self { settings, exact, similar: Mutex::default(), corrections: Mutex::default() }
    }

    pub fn settings(&self) -> CacheSettings {
        self.settings
    }

    /// True when the user has corrections, so the message must be embedded before the exact
    /// lookup (a correction outranks a cached decision).
    pub fn has_corrections(&self, tenant: &str, user: &str) -> bool {
        lock(&self.corrections).get(&(tenant.to_owned(), user.to_owned())).is_some_and(|c| !c.is_empty())
    }

    /// The user's most similar correction at or above the threshold.
    pub fn correction(&self, tenant: &str, user: &str, vector: &[f32]) -> Option<Hit> {
        let corrections = lock(&self.corrections);
        let learned = corrections.get(&(tenant.to_owned(), user.to_owned()))?;
        let (similarity, best) =
            learned.iter().map(|l| (dot(&l.vector, vector), l)).max_by(|a, b| a.0.total_cmp(&b.0))?;
        (similarity >= self.settings.similarity).then(|| Hit {
            cached: CachedRoute { route: best.route, reasoning: String::new(), domains: Vec::new() },
            kind: HitKind::Correction { similarity, message: best.message.clone() },
        })
    }

    /// The tenant's decision for exactly this message.
    pub async fn exact(&self, tenant: &str, message: &str) -> Result<Option<Hit>, StoreError> {
        let cached = self.exact.get(tenant, &normalize(message)).await?;
        Ok(cached.map(|cached| Hit { cached, kind: HitKind::Exact }))
    }

    /// The tenant's most similar cached decision at or above the threshold.
    pub fn similar(&self, tenant: &str, vector: &[f32]) -> Option<Hit> {
        let mut similar = lock(&self.similar);
        similar.clock += 1;
        let clock = similar.clock;
        let entries = similar.tenants.get_mut(tenant)?;
        entries.last_used = clock;
        let (similarity, best) =
            entries.entries.iter().map(|(_, v, cached)| (dot(v, vector), cached)).max_by(|a, b| a.0.total_cmp(&b.0))?;
        (similarity >= self.settings.similarity)
            .then(|| Hit { cached: best.clone(), kind: HitKind::Similar { similarity } })
    }

    /// Caches a decision the routing call made for a tenant's message.
    pub async fn put(
        &self,
        tenant: &str,
        message: &str,
        vector: Option<&[f32]>,
        cached: &CachedRoute,
    ) -> Result<(), StoreError> {
        let normalized = normalize(message);
        if let Some(vector) = vector {
            self.put_similar(tenant, &normalized, vector, cached);
        }
        self.exact.put(tenant, &normalized, cached, self.settings.ttl).await
    }

    fn put_similar(&self, tenant: &str, normalized: &str, vector: &[f32], cached: &CachedRoute) {
        let mut similar = lock(&self.similar);
        similar.clock += 1;
        let clock = similar.clock;
        if !similar.tenants.contains_key(tenant) && similar.tenants.len() >= self.settings.tenants.max(1) {
            let coldest = similar.tenants.iter().min_by_key(|(_, e)| e.last_used).map(|(t, _)| t.clone());
            if let Some(coldest) = coldest {
                similar.tenants.remove(&coldest);
            }
        }
        let entries = similar.tenants.entry(tenant.to_owned()).or_default();
        entries.last_used = clock;
        entries.entries.retain(|(text, _, _)| text != normalized);
        if entries.entries.len() >= self.settings.entries_per_tenant.max(1) {
            entries.entries.pop_front();
        }
        entries.entries.push_back((normalized.to_owned(), vector.to_vec(), cached.clone()));
    }

    /// Forgets the tenant's cached decision for a message (a user said it was wrong).
    pub async fn forget(&self, tenant: &str, message: &str) -> Result<(), StoreError> {
        let normalized = normalize(message);
        if let Some(entries) = lock(&self.similar).tenants.get_mut(tenant) {
            entries.entries.retain(|(text, _, _)| *text != normalized);
        }
        self.exact.forget(tenant, &normalized).await
    }

    /// Adds (or replaces, by answer) a user's correction in process.
    fn learn(&self, correction: &Correction, vector: Vec<f32>) {
        let mut corrections = lock(&self.corrections);
        let learned = corrections.entry((correction.tenant.clone(), correction.user.clone())).or_default();
        learned.retain(|l| l.response_id != correction.response_id);
        if learned.len() >= self.settings.corrections_per_user.max(1) {
            learned.remove(0);
        }
        learned.push(Learned {
            message: correction.message.clone(),
            vector,
            route: correction.route,
            response_id: correction.response_id.clone(),
        });
    }
}

/// Corrections: stored, then loaded into every replica's cache. Each replica pages through the
/// store by id every `refresh`, embedding what is new; the replica that took the feedback
/// learns it at once.
pub struct Learning {
    cache: Arc<RoutingCache>,
    store: Arc<dyn AnalyticsStore>,
    fast: Arc<FastPath>,
    last_seen: tokio::sync::Mutex<i64>,
}

/// Corrections read per page.
const PAGE: i64 = 500;

impl Learning {
    pub fn new(cache: Arc<RoutingCache>, store: Arc<dyn AnalyticsStore>, fast: Arc<FastPath>) -> Arc<Self> {
        Arc::new(Self { cache, store, fast, last_seen: tokio::sync::Mutex::new(0) })
    }

    /// Stores a correction, forgets the tenant's cached decision for the message, and learns
    /// the correction here at once.
    pub async fn correct(&self, correction: Correction) -> Result<(), StoreError> {
        self.store.put_correction(&correction).await?;
        self.cache.forget(&correction.tenant, &correction.message).await?;
        match self.fast.embed(&correction.message).await {
            Some(vector) => self.cache.learn(&correction, vector),
            None => tracing::warn!("the embedding model is not loaded: the correction applies once it is"),
        }
        Ok(())
    }

    /// Loads the corrections stored since the last refresh (all of them the first time).
    /// Waits for the embedding model: corrections are matched by meaning.
    pub async fn refresh(&self) -> Result<usize, StoreError> {
        if !self.fast.is_ready() {
            return Ok(0);
        }
        let mut last_seen = self.last_seen.lock().await;
        let mut loaded = 0;
        loop {
            let page = self.store.corrections_after(*last_seen, PAGE).await?;
            if page.is_empty() {
                break;
            }
            let count = page.len();
            for stored in page {
                let Some(vector) = self.fast.embed(&stored.correction.message).await else {
                    // The model failed: keep the place, so this correction is tried again.
                    return Ok(loaded);
                };
                self.cache.learn(&stored.correction, vector);
                *last_seen = stored.id;
                loaded += 1;
            }
            if (count as i64) < PAGE {
                break;
            }
        }
        Ok(loaded)
    }

    /// Refreshes every `every` until the process ends.
    pub fn spawn_refresh(self: &Arc<Self>, every: Duration) {
        let learning = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match learning.refresh().await {
                    Ok(0) => {}
                    Ok(loaded) => tracing::info!(loaded, "loaded routing corrections"),
                    Err(err) => tracing::warn!(error = %err, "loading routing corrections failed; retrying"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(values: &[f32]) -> Vec<f32> {
        let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
        values.iter().map(|v| v / norm).collect()
    }

    fn cached(route: Route) -> CachedRoute {
        CachedRoute { route, reasoning: "because".into(), domains: Vec::new() }
    }

    #[tokio::test]
    async fn exact_entries_are_per_tenant_and_normalized() {
        let cache = RoutingCache::memory(CacheSettings::default());
        cache.put("acme", "What is in  README.md?", None, &cached(Route::McpAgent)).await.unwrap();
        let hit = cache.exact("acme", "what is in readme.md?").await.unwrap().expect("hit");
        assert_eq!((hit.cached.route, &hit.kind), (Route::McpAgent, &HitKind::Exact));
        assert_eq!(hit.reasoning(), "cached decision for the same message: because");
        let direct =
            Hit { cached: CachedRoute { reasoning: String::new(), ..cached(Route::Direct) }, kind: HitKind::Exact };
        assert_eq!(direct.reasoning(), "cached decision for the same message");
        assert_eq!(cache.exact("globex", "What is in README.md?").await.unwrap(), None);
        cache.forget("acme", "WHAT IS IN README.MD?").await.unwrap();
        assert_eq!(cache.exact("acme", "What is in README.md?").await.unwrap(), None);
    }

    #[tokio::test]
    async fn similar_entries_need_the_threshold_and_stay_in_their_tenant() {
        let cache = RoutingCache::memory(CacheSettings { similarity: 0.9, ..CacheSettings::default() });
        let stored = unit(&[1.0, 0.0, 0.0]);
        cache.put("acme", "read the file", Some(&stored), &cached(Route::McpAgent)).await.unwrap();
        let close = unit(&[1.0, 0.2, 0.0]);
        let far = unit(&[1.0, 1.0, 0.0]);
        let hit = cache.similar("acme", &close).expect("close enough");
        assert!(matches!(hit.kind, HitKind::Similar { similarity } if similarity > 0.9));
        assert!(cache.similar("acme", &far).is_none(), "0.71 is below the threshold");
        assert!(cache.similar("globex", &close).is_none());
    }

    #[tokio::test]
    async fn tenants_and_entries_are_bounded() {
        let settings = CacheSettings { entries_per_tenant: 2, tenants: 2, ..CacheSettings::default() };
        let cache = RoutingCache::memory(settings);
        let v = |x: f32| unit(&[1.0, x, 0.0]);
        for (i, x) in [0.0f32, 5.0, 50.0].iter().enumerate() {
            cache.put("acme", &format!("m{i}"), Some(&v(*x)), &cached(Route::Direct)).await.unwrap();
        }
        assert!(cache.similar("acme", &v(0.0)).is_none(), "the oldest entry was evicted");
        assert!(cache.similar("acme", &v(50.0)).is_some());
        cache.put("b", "m", Some(&v(0.0)), &cached(Route::Direct)).await.unwrap();
        let _ = cache.similar("b", &v(0.0));
        cache.put("c", "m", Some(&v(0.0)), &cached(Route::Direct)).await.unwrap();
        // acme was used least recently: it made room for c.
        assert!(cache.similar("acme", &v(50.0)).is_none());
        assert!(cache.similar("b", &v(0.0)).is_some() && cache.similar("c", &v(0.0)).is_some());
    }

    #[test]
    fn corrections_are_per_user_and_replace_by_answer() {
        let cache = RoutingCache::memory(CacheSettings { similarity: 0.9, ..CacheSettings::default() });
        let correction = |user: &str, route, id: &str| Correction {
            tenant: "acme".into(),
            user: user.into(),
            message: "check the weather".into(),
            route,
            response_id: id.into(),
            created_at: chrono::Utc::now(),
        };
        let v = unit(&[0.0, 1.0]);
        cache.learn(&correction("ann", Route::McpAgent, "chat-1"), v.clone());
        assert!(cache.has_corrections("acme", "ann") && !cache.has_corrections("acme", "bob"));
        assert_eq!(cache.correction("acme", "ann", &v).expect("hit").cached.route, Route::McpAgent);
        assert!(cache.correction("acme", "bob", &v).is_none());
        assert!(cache.correction("globex", "ann", &v).is_none());
        cache.learn(&correction("ann", Route::Direct, "chat-1"), v.clone());
        assert_eq!(cache.correction("acme", "ann", &v).expect("hit").cached.route, Route::Direct);
    }
}
