//! Spend budgets per tenant: a hard limit that refuses new turns once the period's spend
//! reaches it, and a soft threshold that only warns. The budgets themselves live in a
//! [`BudgetBook`] (Postgres, or memory for `switchyard dev`); what was spent is counted in
//! [`SpendCounters`] (Redis, shared by replicas, or memory), one counter per budget and period,
//! rebuilt from the recorded decisions' costs when Redis has lost it.

mod memory;
mod postgres;
mod redis;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge},
};
use switchyard_kit::{TenantId, UserId, store::StoreError};
use switchyard_llm::ModelRef;

pub use memory::{MemoryBudgetBook, MemorySpendCounters};
pub use postgres::PostgresBudgetBook;
pub use redis::RedisSpendCounters;

use crate::{
    cost::{NANOS_PER_USD, nanos_to_usd},
    error::RouterError,
};

/// A counter outlives its period by this much, so a late turn still finds it.
const COUNTER_MARGIN: Duration = Duration::from_secs(24 * 3600);
/// How long a replica uses a tenant's budgets as read before reading them again: every turn
/// checks them, and a Postgres query per turn would be most of the router's own time. A budget
/// set or deleted takes effect at once on the replica that took the call, within this on the
/// others.
const BOOK_FRESH: Duration = Duration::from_secs(5);
/// Most tenants whose budgets a replica keeps read.
const BOOK_TENANTS: usize = 10_000;

/// The window a budget counts spend over: a UTC calendar day or month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Month => "month",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "day" => Some(Self::Day),
            "month" => Some(Self::Month),
            _ => None,
        }
    }

    /// The start of the window `now` falls in, and the start of the next one.
    pub fn window(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let today = now.date_naive();
        let (start, end) = match self {
            Self::Day => (today, today.succ_opt().unwrap_or(today)),
            Self::Month => {
                let first = NaiveDate::from_ymd_opt(today.year(), today.month(), 1).unwrap_or(today);
                let next = if today.month() == 12 {
                    NaiveDate::from_ymd_opt(today.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(today.year(), today.month() + 1, 1)
                };
                (first, next.unwrap_or(first))
            }
        };
        let at_midnight = |date: NaiveDate| Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).unwrap_or_default());
        (at_midnight(start), at_midnight(end))
    }
}

/// What a budget does to new turns once its hard limit is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OnLimit {
    /// Refuses them (`RESOURCE_EXHAUSTED`).
    #[default]
    Refuse,
    /// Answers them on the direct route, by `model` when there is one.
    Degrade { model: Option<ModelRef> },
}

impl OnLimit {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::Degrade { .. } => "degrade",
        }
    }

    /// As kept: `refuse`, or `degrade` with its model (empty for none).
    pub fn parse(action: &str, model: &str) -> Option<Self> {
        match action {
            "refuse" => Some(Self::Refuse),
            "degrade" => Some(Self::Degrade { model: model.parse().ok() }),
            _ => None,
        }
    }

    /// The model degraded turns are answered by, when one is named.
    pub fn degrade_model(&self) -> Option<&ModelRef> {
        match self {
            Self::Degrade { model } => model.as_ref(),
            Self::Refuse => None,
        }
    }
}

/// A budget as set: valid by construction (a positive limit, a soft threshold below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub tenant: TenantId,
    /// Empty: the whole tenant.
    pub key_id: String,
    pub limit_nanousd: i64,
    /// 0: no soft threshold.
    pub soft_nanousd: i64,
    pub period: Period,
    pub on_limit: OnLimit,
    /// Empty: every user (of the tenant, or of the key).
    pub user_id: String,
}

/// Longest API key id accepted.
const MAX_KEY_ID_BYTES: usize = 128;

impl Budget {
    /// Checks a budget as a caller sent it; errors name the field.
    pub fn new(
        tenant: &str,
        key_id: &str,
        limit_usd: f64,
        soft_usd: f64,
        period: Option<Period>,
    ) -> Result<Self, RouterError> {
        let tenant = TenantId::parse(tenant).map_err(|_| {
            RouterError::invalid("tenant_id", format!("`{tenant}` must be 1 to 64 characters of [A-Za-z0-9._-]"))
        })?;
        if key_id.len() > MAX_KEY_ID_BYTES
            || !key_id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(RouterError::invalid("key_id", "must be at most 128 characters of [A-Za-z0-9._-]"));
        }
        let period = period.ok_or_else(|| RouterError::invalid("period", "must be day or month"))?;
        let limit_nanousd = usd_to_nanos(limit_usd).filter(|n| *n > 0).ok_or_else(|| {
            RouterError::invalid("limit_usd", format!("must be a positive amount of dollars, got {limit_usd}"))
        })?;
        let soft_nanousd = usd_to_nanos(soft_usd).ok_or_else(|| {
            RouterError::invalid("soft_usd", format!("must be zero or a positive amount of dollars, got {soft_usd}"))
        })?;
        if soft_nanousd > limit_nanousd {
            return Err(RouterError::invalid(
                "soft_usd",
                format!("must not be above limit_usd ({soft_usd} > {limit_usd})"),
            ));
        }
        Ok(Self {
            tenant,
            key_id: key_id.to_owned(),
            limit_nanousd,
            soft_nanousd,
            period,
            on_limit: OnLimit::Refuse,
            user_id: String::new(),
        })
    }

    /// The same budget for `user`'s turns only (empty: every user's); errors name `user_id`.
    pub fn for_user(mut self, user: &str) -> Result<Self, RouterError> {
        if !user.is_empty() {
            UserId::parse(user).map_err(|err| RouterError::invalid("user_id", err.reason))?;
        }
        self.user_id = user.to_owned();
        Ok(self)
    }

    /// The same budget doing `on_limit` at its hard limit.
    pub fn on_limit(mut self, on_limit: OnLimit) -> Self {
        self.on_limit = on_limit;
        self
    }

    /// How the budget is named to callers: `tenant`, `tenant/key`, `tenant/user:u` or
    /// `tenant/key/user:u`.
    pub fn name(&self) -> String {
        let mut name = self.tenant.as_str().to_owned();
        if !self.key_id.is_empty() {
            name = format!("{name}/{}", self.key_id);
        }
        if !self.user_id.is_empty() {
            name = format!("{name}/user:{}", self.user_id);
        }
        name
    }
}

/// Whole dollars and fractions to nano-dollars; `None` for negative, non-finite or huge.
fn usd_to_nanos(usd: f64) -> Option<i64> {
    let nanos = (usd * NANOS_PER_USD).round();
    (usd.is_finite() && nanos >= 0.0 && nanos < i64::MAX as f64).then_some(nanos as i64)
}

/// A budget with what was spent in its current period.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStatus {
    pub budget: Budget,
    pub spent_nanousd: i64,
    pub period_start: DateTime<Utc>,
}

/// Where budgets are kept, and the record of what turns cost that spend is rebuilt from.
#[async_trait]
pub trait BudgetBook: Send + Sync + 'static {
    async fn put(&self, budget: &Budget) -> Result<(), StoreError>;
    /// Removes a budget; false when there was none.
    async fn delete(&self, tenant: &TenantId, key_id: &str, user_id: &str) -> Result<bool, StoreError>;
    /// One tenant's budgets, or every tenant's.
    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<Budget>, StoreError>;
    /// What the tenant's recorded turns (only those of API key `key_id` and of user `user_id`,
    /// when not empty) cost since `since`, in nano-dollars.
    async fn recorded_spend(
        &self,
        tenant: &TenantId,
        key_id: &str,
        user_id: &str,
        since: DateTime<Utc>,
    ) -> Result<i64, StoreError>;
}

/// Spend counters shared by replicas. Every counter of a tenant is in one Redis Cluster slot.
#[async_trait]
pub trait SpendCounters: Send + Sync + 'static {
    /// The counters' values; `None` where a counter is missing (never set, expired or lost).
    async fn read(&self, tenant: &TenantId, counters: &[String]) -> Result<Vec<Option<i64>>, StoreError>;
    /// Sets a missing counter (a replica that got there first wins); returns its value.
    async fn seed(&self, tenant: &TenantId, counter: &str, nanos: i64, ttl: Duration) -> Result<i64, StoreError>;
    /// Adds to the counters that exist (a missing one is rebuilt on the next check); returns
    /// their new totals, `None` where a counter is missing.
    async fn add(&self, tenant: &TenantId, counters: &[String], nanos: i64) -> Result<Vec<Option<i64>>, StoreError>;
}

/// A check's result for a turn allowed to go on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowance {
    /// The counters the turn's cost is added to.
    counters: Vec<String>,
    /// Set when a soft threshold is passed, or a degrading budget is spent: says which budget
    /// and how much is spent.
    pub warning: Option<String>,
    /// Set when a budget that degrades at its hard limit is spent: the turn goes on degraded.
    pub degrade: Option<Degrade>,
}

/// How a turn past a degrading budget's hard limit goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct Degrade {
    /// The budget's name (`tenant` or `tenant/key`).
    pub budget: String,
    /// The cheaper model the turn is answered by, when the budget names one.
    pub model: Option<ModelRef>,
    /// The line the turn's `degraded` metadata carries.
    pub reason: String,
}

/// A tenant's budgets as read from the book, and when.
type ReadBudgets = (Instant, Arc<Vec<Budget>>);

/// Most counters a replica keeps its own view of (see [`Budgets::with_sync`]).
const VIEW_COUNTERS: usize = 100_000;

/// What this replica last knew a counter to hold: its total as read or as returned by a charge,
/// plus the charges it made since, and when it was last read or charged.
#[derive(Debug, Clone, Copy)]
struct Seen {
    spent: i64,
    at: Instant,
}

/// The router's budgets: the check before a turn and the charge after it.
pub struct Budgets {
    book: Arc<dyn BudgetBook>,
    counters: Arc<dyn SpendCounters>,
    /// (budget name, period start) pairs already warned about by this replica.
    warned: Mutex<HashSet<(String, DateTime<Utc>)>>,
    /// Each tenant's budgets as last read, and when (see [`BOOK_FRESH`]).
    read: Mutex<HashMap<TenantId, ReadBudgets>>,
    /// How old this replica's view of a counter may be when a turn is checked against it; zero:
    /// every check reads the shared counters and every charge is made before the turn ends.
    sync: Duration,
    /// This replica's view of each counter, by tenant and counter name (with a nonzero `sync`).
    seen: Mutex<HashMap<(TenantId, String), Seen>>,
    warnings: Counter<u64>,
    degraded: Counter<u64>,
    used_ratio: Gauge<f64>,
}

impl Budgets {
    pub fn new(book: Arc<dyn BudgetBook>, counters: Arc<dyn SpendCounters>) -> Self {
        let meter = opentelemetry::global::meter("switchyard-router");
        Self {
            book,
            counters,
            warned: Mutex::default(),
            read: Mutex::default(),
            sync: Duration::ZERO,
            seen: Mutex::default(),
            warnings: meter
                .u64_counter("router.budget.warnings")
                .with_description("Turns that went on past a budget's soft threshold, by tenant, key and user")
                .build(),
            degraded: meter
                .u64_counter("router.budget.degraded")
                .with_description(
                    "Turns past a degrading budget's hard limit answered on the direct route (and its cheaper model), by \
                     tenant, key and user",
                )
                .build(),
            used_ratio: meter
                .f64_gauge("switchyard.budget.used_ratio")
                .with_description("Share of a budget's hard limit spent in its current period, by tenant, key and user")
                .build(),
        }
    }

    /// Checks turns against this replica's own view of the spend counters while it is younger
    /// than `sync`, and counts each turn's spend in the background: no round trip to the shared
    /// counters on a turn's path. The view is refreshed by every charge's result (the shared
    /// total) and read again once older than `sync`, so a replica misses at most what the
    /// others spent in the last `sync`. Zero (the default): exact, every check reads the
    /// shared counters and every charge is made before the turn ends.
    pub fn with_sync(mut self, sync: Duration) -> Self {
        self.sync = sync;
        self
    }

    /// In memory (one replica, `switchyard dev`, tests).
    pub fn memory() -> Self {
        Self::new(Arc::new(MemoryBudgetBook::default()), Arc::new(MemorySpendCounters::default()))
    }

    pub async fn set(&self, budget: &Budget) -> Result<BudgetStatus, RouterError> {
        self.book.put(budget).await.map_err(|err| RouterError::unavailable("storing the budget", err.to_string()))?;
        self.forget(&budget.tenant);
        let mut statuses = self.statuses(std::slice::from_ref(budget), false).await?;
        Ok(statuses.remove(0))
    }

    pub async fn delete(&self, tenant: &TenantId, key_id: &str, user_id: &str) -> Result<bool, RouterError> {
        let deleted = self
            .book
            .delete(tenant, key_id, user_id)
            .await
            .map_err(|err| RouterError::unavailable("deleting the budget", err.to_string()))?;
        self.forget(tenant);
        Ok(deleted)
    }

    fn forget(&self, tenant: &TenantId) {
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(tenant);
    }

    /// A tenant's budgets, read from the book at most every [`BOOK_FRESH`].
    async fn tenant_budgets(&self, tenant: &TenantId) -> Result<Arc<Vec<Budget>>, RouterError> {
        if let Some((at, budgets)) = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(tenant)
            && at.elapsed() < BOOK_FRESH
        {
            return Ok(Arc::clone(budgets));
        }
        let budgets = match self.book.list(Some(tenant)).await {
            Ok(budgets) => Arc::new(budgets),
            Err(err) => {
                // Postgres away: the budgets as last read still hold (they change rarely, and
                // the spend is counted in Redis), so turns go on. They are kept as read now, so
                // one turn per BOOK_FRESH pays for trying again, not every turn. A tenant never
                // read cannot be checked: its turns wait for Postgres.
                let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some((at, last)) = read.get_mut(tenant) else {
                    return Err(RouterError::unavailable("reading budgets", err.to_string()));
                };
                // Once per tenant per BOOK_FRESH, but for every tenant: bounded per interval overall.
                switchyard_kit::warn_throttled!("budgets unreadable", tenant = %tenant.as_str(), error = %err, read_ago = ?at.elapsed(), "budgets unreadable; checking turns against their last read");
                *at = Instant::now();
                return Ok(Arc::clone(last));
            }
        };
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if read.len() >= BOOK_TENANTS {
            read.retain(|_, (at, _)| at.elapsed() < BOOK_FRESH);
            if read.len() >= BOOK_TENANTS {
                read.clear();
            }
        }
        read.insert(tenant.clone(), (Instant::now(), Arc::clone(&budgets)));
        Ok(budgets)
    }

    pub async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<BudgetStatus>, RouterError> {
        let budgets =
            self.book.list(tenant).await.map_err(|err| RouterError::unavailable("reading budgets", err.to_string()))?;
        let mut statuses = Vec::with_capacity(budgets.len());
        for budget in budgets {
            statuses.extend(self.statuses(std::slice::from_ref(&budget), false).await?);
        }
        Ok(statuses)
    }

    /// Before a turn: refuses it when the tenant's budget, or that of the API key it came with
    /// or of the user the credential names, is spent (or degrades it, for a budget that says
    /// so); otherwise says which counters its cost goes to and warns past a soft threshold.
    pub async fn check(
        &self,
        tenant: &TenantId,
        key_id: Option<&str>,
        user: Option<&str>,
    ) -> Result<Allowance, RouterError> {
        let budgets: Vec<Budget> = self
            .tenant_budgets(tenant)
            .await?
            .iter()
            .filter(|budget| budget.key_id.is_empty() || Some(budget.key_id.as_str()) == key_id)
            .filter(|budget| budget.user_id.is_empty() || Some(budget.user_id.as_str()) == user)
            .cloned()
            .collect();
        if budgets.is_empty() {
            return Ok(Allowance::default());
        }
        let statuses = self.statuses(&budgets, true).await?;
        let mut allowance = Allowance::default();
        for status in statuses {
            let budget = &status.budget;
            let labels = [
                KeyValue::new("tenant", budget.tenant.as_str().to_owned()),
                KeyValue::new("key", budget.key_id.clone()),
                KeyValue::new("user", budget.user_id.clone()),
            ];
            self.used_ratio.record(status.spent_nanousd as f64 / budget.limit_nanousd as f64, &labels);
            let limit = dollars(budget.limit_nanousd);
            let spent = dollars(status.spent_nanousd);
            if status.spent_nanousd >= budget.limit_nanousd
                && let OnLimit::Degrade { model } = &budget.on_limit
            {
                let answered_by = model.as_ref().map_or_else(String::new, |model| format!(" by {model}"));
                let reason = format!(
                    "budget {} of {limit} per {} is spent ({spent}): answered on the direct route{answered_by}",
                    budget.name(),
                    budget.period.as_str()
                );
                self.degraded.add(1, &labels);
                let first = self
                    .warned
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert((format!("{} spent", budget.name()), status.period_start));
                if first {
                    tracing::warn!(tenant = %budget.tenant.as_str(), key_id = %budget.key_id, user_id = %budget.user_id, spent = %spent, limit = %limit, model = %model.as_ref().map(ToString::to_string).unwrap_or_default(), "budget spent; its turns are degraded to the direct route");
                }
                if allowance.degrade.is_none() {
                    allowance.warning = Some(reason.clone());
                    allowance.degrade = Some(Degrade { budget: budget.name(), model: model.clone(), reason });
                }
                allowance.counters.push(counter_name(budget, status.period_start));
                continue;
            }
            if status.spent_nanousd >= budget.limit_nanousd {
                let now = Utc::now();
                let (_, period_end) = budget.period.window(now);
                return Err(RouterError::BudgetSpent {
                    message: format!(
                        "budget {} of {limit} per {} is spent ({spent})",
                        budget.name(),
                        budget.period.as_str()
                    ),
                    retry_after: (period_end - now).to_std().unwrap_or_default(),
                });
            }
            if budget.soft_nanousd > 0 && status.spent_nanousd >= budget.soft_nanousd {
                let warning = format!(
                    "budget {} of {limit} per {}: {spent} spent, past its soft threshold of {}",
                    budget.name(),
                    budget.period.as_str(),
                    dollars(budget.soft_nanousd)
                );
                self.warnings.add(1, &labels);
                let first = self
                    .warned
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert((budget.name(), status.period_start));
                if first {
                    tracing::warn!(tenant = %budget.tenant.as_str(), key_id = %budget.key_id, user_id = %budget.user_id, spent = %spent, soft = %dollars(budget.soft_nanousd), limit = %limit, "budget past its soft threshold");
                }
                if allowance.degrade.is_none() {
                    allowance.warning = Some(warning);
                }
            }
            allowance.counters.push(counter_name(budget, status.period_start));
        }
        Ok(allowance)
    }

    /// After a turn: adds its cost to the counters of the budgets it was checked against. A
    /// failure is logged, not returned: the answer stands.
    /// With a nonzero sync interval the charge is made in the background, after this
    /// replica's view has taken it in (its next check sees it at once).
    pub async fn charge(self: &Arc<Self>, tenant: &TenantId, allowance: &Allowance, cost_nanousd: i64) {
        if allowance.counters.is_empty() || cost_nanousd <= 0 {
            return;
        }
        if self.sync.is_zero() {
            self.charge_shared(tenant, &allowance.counters, cost_nanousd).await;
            return;
        }
        {
            let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for counter in &allowance.counters {
                if let Some(view) = seen.get_mut(&(tenant.clone(), counter.clone())) {
                    view.spent += cost_nanousd;
                }
            }
        }
        let budgets = Arc::clone(self);
        let (tenant, counters) = (tenant.clone(), allowance.counters.clone());
        tokio::spawn(async move { budgets.charge_shared(&tenant, &counters, cost_nanousd).await });
    }

    async fn charge_shared(&self, tenant: &TenantId, counters: &[String], cost_nanousd: i64) {
        match self.counters.add(tenant, counters, cost_nanousd).await {
            Ok(totals) if !self.sync.is_zero() => self.remember(tenant, counters, &totals, true),
            Ok(_) => {}
            Err(err) => {
                switchyard_kit::warn_throttled!("spend", tenant = %tenant.as_str(), error = %err, "could not count a turn's spend; the counter is rebuilt from the recorded costs when lost");
            }
        }
    }

    /// Takes shared totals into this replica's view; a missing counter leaves the view, so
    /// the next check reads (and rebuilds) it. A charge's total (`keep_higher`) may come back
    /// before that of a charge made just before it, and miss it: the higher of the two stands.
    fn remember(&self, tenant: &TenantId, counters: &[String], totals: &[Option<i64>], keep_higher: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() >= VIEW_COUNTERS {
            let sync = self.sync;
            seen.retain(|_, view| view.at.elapsed() < sync);
            if seen.len() >= VIEW_COUNTERS {
                seen.clear();
            }
        }
        let now = Instant::now();
        for (counter, total) in counters.iter().zip(totals) {
            let key = (tenant.clone(), counter.clone());
            match total {
                Some(total) => {
                    let spent = match seen.get(&key) {
                        Some(view) if keep_higher => view.spent.max(*total),
                        _ => *total,
                    };
                    seen.insert(key, Seen { spent, at: now });
                }
                None => {
                    seen.remove(&key);
                }
            }
        }
    }

    /// This replica's view of the counters, where younger than the sync interval.
    fn viewed(&self, tenant: &TenantId, counters: &[String]) -> Vec<Option<i64>> {
        if self.sync.is_zero() {
            return vec![None; counters.len()];
        }
        let seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counters
            .iter()
            .map(|counter| {
                seen.get(&(tenant.clone(), counter.clone()))
                    .filter(|view| view.at.elapsed() < self.sync)
                    .map(|view| view.spent)
            })
            .collect()
    }

    /// What each budget has spent in its current period: its counter, rebuilt from the recorded
    /// turns' costs when missing.
    /// With `viewed`, this replica's view stands in for a counter while it is fresh (see
    /// [`Budgets::with_sync`]); only the others are read.
    async fn statuses(&self, budgets: &[Budget], viewed: bool) -> Result<Vec<BudgetStatus>, RouterError> {
        let Some(first) = budgets.first() else { return Ok(Vec::new()) };
        let tenant = &first.tenant;
        let now = Utc::now();
        let windows: Vec<(DateTime<Utc>, DateTime<Utc>)> = budgets.iter().map(|b| b.period.window(now)).collect();
        let names: Vec<String> = budgets.iter().zip(&windows).map(|(b, (start, _))| counter_name(b, *start)).collect();
        let unavailable = |err: StoreError| RouterError::unavailable("reading budget spend", err.to_string());
        let mut values = if viewed { self.viewed(tenant, &names) } else { vec![None; names.len()] };
        let unseen: Vec<String> =
            names.iter().zip(&values).filter(|(_, value)| value.is_none()).map(|(name, _)| name.clone()).collect();
        if !unseen.is_empty() {
            let mut read = self.counters.read(tenant, &unseen).await.map_err(unavailable)?.into_iter();
            for value in values.iter_mut().filter(|value| value.is_none()) {
                *value = read.next().flatten();
            }
        }
        let mut rebuilt = Vec::new();
        let mut statuses = Vec::with_capacity(budgets.len());
        for (((budget, (start, end)), name), value) in budgets.iter().zip(&windows).zip(&names).zip(values) {
            let spent = match value {
                Some(spent) => spent,
                None => {
                    let recorded = self
                        .book
                        .recorded_spend(tenant, &budget.key_id, &budget.user_id, *start)
                        .await
                        .map_err(unavailable)?;
                    let ttl = (*end - now).to_std().unwrap_or_default() + COUNTER_MARGIN;
                    self.counters.seed(tenant, name, recorded, ttl).await.map_err(unavailable)?
                }
            };
            rebuilt.push(Some(spent));
            statuses.push(BudgetStatus { budget: budget.clone(), spent_nanousd: spent, period_start: *start });
        }
        if !self.sync.is_zero() && !unseen.is_empty() {
            // What was read or rebuilt starts a fresh view; the viewed ones keep theirs.
            let (names, totals): (Vec<String>, Vec<Option<i64>>) =
                names.into_iter().zip(rebuilt).filter(|(name, _)| unseen.contains(name)).unzip();
            self.remember(tenant, &names, &totals, false);
        }
        Ok(statuses)
    }
}

/// A budget's counter for the period starting at `start` (within the tenant's slot):
/// `<key or *>[:user:<user>]:<period>:<start date>`.
fn counter_name(budget: &Budget, start: DateTime<Utc>) -> String {
    let key = if budget.key_id.is_empty() { "*" } else { budget.key_id.as_str() };
    let user = if budget.user_id.is_empty() { String::new() } else { format!(":user:{}", budget.user_id) };
    format!("{key}{user}:{}:{}", budget.period.as_str(), start.format("%Y-%m-%d"))
}

/// Cents, or six decimals below a cent (a budget of a few calls).
fn dollars(nanos: i64) -> String {
    if nanos.abs() < 10_000_000 {
        format!("${:.6}", nanos_to_usd(nanos))
    } else {
        format!("${:.2}", nanos_to_usd(nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_utc_days_and_months() {
        let at = Utc.with_ymd_and_hms(2026, 12, 31, 15, 4, 5).unwrap();
        assert_eq!(
            Period::Day.window(at),
            (Utc.with_ymd_and_hms(2026, 12, 31, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(
            Period::Month.window(at),
            (Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
    }

    #[test]
    fn bad_budgets_name_their_field() {
        let field = |result: Result<Budget, RouterError>| match result {
            Err(RouterError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        };
        assert_eq!(field(Budget::new("acme", "", -1.0, 0.0, Some(Period::Day))), "limit_usd");
        assert_eq!(field(Budget::new("acme", "", 0.0, 0.0, Some(Period::Day))), "limit_usd");
        assert_eq!(field(Budget::new("acme", "", 5.0, 6.0, Some(Period::Day))), "soft_usd");
        assert_eq!(field(Budget::new("acme", "", 5.0, -1.0, Some(Period::Day))), "soft_usd");
        assert_eq!(field(Budget::new("acme", "", 5.0, 1.0, None)), "period");
        assert_eq!(field(Budget::new("no spaces", "", 5.0, 1.0, Some(Period::Day))), "tenant_id");
        assert_eq!(field(Budget::new("acme", "a/b", 5.0, 1.0, Some(Period::Day))), "key_id");
        let budget = Budget::new("acme", "", 5.0, 4.0, Some(Period::Month)).unwrap();
        assert_eq!(budget.limit_nanousd, 5_000_000_000);
        assert_eq!(budget.name(), "acme");
        let budget = budget.for_user("bob@example.com").unwrap();
        assert_eq!(budget.name(), "acme/user:bob@example.com");
        let start = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
        assert_eq!(counter_name(&budget, start), "*:user:bob@example.com:month:2026-11-01");
        let bad_user = Budget::new("acme", "", 5.0, 1.0, Some(Period::Day)).and_then(|b| b.for_user("no spaces"));
        assert_eq!(field(bad_user), "user_id");
    }
}
