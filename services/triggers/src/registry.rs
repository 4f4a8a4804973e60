//! The trigger registry: validates registrations, persists them, and keeps one compiled
//! matcher current. Writes go to the store first; the matcher is rebuilt on a blocking thread
//! and swapped in atomically, so detection never waits for a rebuild and always sees one whole
//! registry version. Changes made by other replicas arrive through the store's version channel.
//!
//! The same rebuild indexes the roles' exemplars for the semantic signal once its model is
//! loaded; detection embeds a query only when the trigger scores leave the decision open.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::Duration,
};

use arc_swap::ArcSwap;
use chrono::Utc;

use crate::{
    blend::{Ranking, SemanticScoring, SemanticState},
    domain::{self, Limits, Query, RoleId, RoleRegistration, Trigger, TriggerKind},
    error::TriggersError,
    hysteresis::{self, BestRole},
    matcher::{Matcher, Scoring},
    packs::DomainPacks,
    semantic::{ModelState, SemanticIndex, SemanticModel},
    store::{Snapshot, TriggerStore},
};

/// Registry behaviour.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    pub limits: Limits,
    pub scoring: Scoring,
    /// Default hysteresis ratio for `best_role` (0.8, docs/requirements.md#triggers-hysteresis).
    pub hysteresis_ratio: f64,
    pub semantic: SemanticScoring,
}

impl Default for RegistryConfig {
    /// The flags' defaults.
    fn default() -> Self {
        let config = crate::TriggersConfig::defaults();
        Self {
            limits: config.limits(),
            scoring: Scoring { diversity_bonus_per_kind: config.diversity_bonus },
            hysteresis_ratio: config.hysteresis_ratio,
            semantic: config.semantic_scoring(),
        }
    }
}

/// What a role registers, before validation.
#[derive(Debug, Clone, Default)]
pub struct RoleInput {
    pub role_id: String,
    pub domains: Vec<String>,
    pub custom_triggers: Vec<TriggerInput>,
    pub description: String,
    pub example_questions: Vec<String>,
}

/// A trigger as a caller submits it, before validation.
#[derive(Debug, Clone)]
pub struct TriggerInput {
    pub pattern: String,
    /// `None` when the caller left the kind unspecified.
    pub kind: Option<TriggerKind>,
    pub priority: u32,
}

/// One registry version, compiled.
pub struct Compiled {
    pub version: u64,
    pub roles: BTreeMap<RoleId, RoleRegistration>,
    pub matcher: Matcher,
    /// The roles' exemplars; `None` until the semantic model is loaded.
    pub semantic: Option<SemanticIndex>,
}

pub struct TriggerRegistry {
    store: Arc<dyn TriggerStore>,
    packs: Arc<DomainPacks>,
    config: RegistryConfig,
    model: Arc<SemanticModel>,
    current: ArcSwap<Compiled>,
    rebuild_lock: tokio::sync::Mutex<()>,
}

/// A page of registrations.
pub struct RolePage {
    pub roles: Vec<(RoleRegistration, u32)>,
    pub next_page_token: Option<String>,
    pub version: u64,
}

impl TriggerRegistry {
    /// Loads the store and compiles the first matcher (and exemplar index, if `model` is
    /// loaded already).
    pub async fn open(
        store: Arc<dyn TriggerStore>,
        packs: Arc<DomainPacks>,
        config: RegistryConfig,
        model: Arc<SemanticModel>,
    ) -> Result<Arc<Self>, TriggersError> {
        let snapshot = store.load().await.map_err(TriggersError::StoreUnavailable)?;
        let compiled = compile(snapshot, packs.clone(), config.scoring, model.clone()).await?;
        tracing::info!(version = compiled.version, roles = compiled.roles.len(), "trigger registry loaded");
        Ok(Arc::new(Self {
            store,
            packs,
            config,
            model,
            current: ArcSwap::from_pointee(compiled),
            rebuild_lock: tokio::sync::Mutex::new(()),
        }))
    }

    pub fn model(&self) -> &SemanticModel {
        &self.model
    }

    /// Indexes the exemplars once `ready` fires (the model finished loading after start),
    /// retrying every `retry` while the store is unreachable.
    pub fn index_when_ready(self: &Arc<Self>, ready: tokio::sync::oneshot::Receiver<()>, retry: Duration) {
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            if ready.await.is_err() {
                return;
            }
            while let Some(registry) = registry.upgrade() {
                match registry.refresh().await {
                    Ok(_) => return,
                    Err(err) => tracing::warn!(%err, "indexing exemplars failed, retrying"),
                }
                drop(registry);
                tokio::time::sleep(retry).await;
            }
        });
    }

    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    pub fn packs(&self) -> &DomainPacks {
        &self.packs
    }

    /// The compiled registry detection is currently using.
    pub fn current(&self) -> Arc<Compiled> {
        self.current.load_full()
    }

    pub async fn ping(&self) -> Result<(), TriggersError> {
        self.store.ping().await.map_err(TriggersError::StoreUnavailable)
    }

    /// Reloads from the store and swaps in a new matcher if the version moved.
    pub async fn refresh(&self) -> Result<u64, TriggersError> {
        let _one_rebuild_at_a_time = self.rebuild_lock.lock().await;
        let snapshot = self.store.load().await.map_err(TriggersError::StoreUnavailable)?;
        let (known, indexed) = {
            let current = self.current.load();
            (current.version, current.semantic.is_some())
        };
        // Also rebuild when the model has loaded since the last build, to index the exemplars.
        let model_is_new = !indexed && self.model.embedder().is_some();
        if snapshot.version == known && !model_is_new {
            return Ok(known);
        }
        let compiled = compile(snapshot, self.packs.clone(), self.config.scoring, self.model.clone()).await?;
        let version = compiled.version;
        tracing::info!(
            from = known,
            to = version,
            roles = compiled.roles.len(),
            triggers = compiled.matcher.trigger_count(),
            semantic_roles = compiled.semantic.as_ref().map_or(0, SemanticIndex::role_count),
            exemplars = compiled.semantic.as_ref().map_or(0, SemanticIndex::text_count),
            "matcher rebuilt"
        );
        self.current.store(Arc::new(compiled));
        Ok(version)
    }

    /// Follows the store's version channel, rebuilding when another replica (or this one)
    /// changes the registry; retries every `retry` while the store is unreachable.
    pub fn spawn_follower(self: &Arc<Self>, retry: Duration) -> tokio::task::JoinHandle<()> {
        let registry = Arc::downgrade(self);
        let mut versions = self.store.versions();
        tokio::spawn(async move {
            loop {
                if versions.changed().await.is_err() {
                    return;
                }
                loop {
                    let Some(registry) = registry.upgrade() else { return };
                    let wanted = *versions.borrow_and_update();
                    if registry.current.load().version == wanted {
                        break;
                    }
                    match registry.refresh().await {
                        Ok(_) => break,
                        Err(err) => {
                            tracing::warn!(%err, "registry refresh failed, retrying");
                            drop(registry);
                            tokio::time::sleep(retry).await;
                        }
                    }
                }
            }
        })
    }

    /// Validates and stores a role's triggers (replacing earlier ones); returns the stored
    /// registration and the registry version that contains it, already compiled here.
    pub async fn register(&self, input: &RoleInput) -> Result<(RoleRegistration, u64), TriggersError> {
        let registration = self.validate(input)?;
        let current = self.current.load();
        let previous = current.roles.get(&registration.role_id).map_or(0, |r| r.custom_triggers.len());
        let would_hold = current.matcher.trigger_count() + registration.custom_triggers.len().saturating_sub(previous);
        if would_hold > self.config.limits.max_registry_triggers {
            return Err(TriggersError::RegistryFull { would_hold, limit: self.config.limits.max_registry_triggers });
        }
        drop(current);
        let version = self.store.upsert(&registration).await.map_err(TriggersError::store_write)?;
        self.refresh().await?;
        tracing::info!(role_id = %registration.role_id, version, domains = ?registration.domains, custom = registration.custom_triggers.len(), "role triggers registered");
        Ok((registration, version))
    }

    fn validate(&self, input: &RoleInput) -> Result<RoleRegistration, TriggersError> {
        let (domains, custom) = (&input.domains, &input.custom_triggers);
        let limits = &self.config.limits;
        let role_id = RoleId::parse(&input.role_id).map_err(|reason| TriggersError::invalid("role_id", reason))?;
        let mut unique_domains = Vec::new();
        for (index, domain) in domains.iter().enumerate() {
            let name = domain.trim().to_lowercase();
            if self.packs.get(&name).is_none() {
                let known: Vec<_> = self.packs.names().collect();
                return Err(TriggersError::invalid(
                    format!("domains[{index}]"),
                    format!("unknown domain `{domain}` (known: {})", known.join(", ")),
                ));
            }
            if !unique_domains.contains(&name) {
                unique_domains.push(name);
            }
        }
        if custom.len() > limits.max_custom_triggers {
            return Err(TriggersError::invalid(
                "custom_triggers",
                format!("{} triggers given, over the limit of {} per role", custom.len(), limits.max_custom_triggers),
            ));
        }
        let mut triggers: Vec<Trigger> = Vec::with_capacity(custom.len());
        let mut seen = HashSet::new();
        for (index, input) in custom.iter().enumerate() {
            let field = format!("custom_triggers[{index}]");
            let kind = input.kind.ok_or_else(|| {
                TriggersError::invalid(format!("{field}.kind"), "must be KEYWORD, PHRASE or REGEX".into())
            })?;
            let trigger = Trigger::new(&input.pattern, kind, input.priority, limits, &field)?;
            if seen.insert((trigger.kind, trigger.pattern.clone())) {
                triggers.push(trigger);
            } else if let Some(existing) =
                triggers.iter_mut().find(|t| t.kind == trigger.kind && t.pattern == trigger.pattern)
            {
                existing.priority = existing.priority.max(trigger.priority);
            }
        }
        Ok(RoleRegistration {
            role_id,
            domains: unique_domains,
            custom_triggers: triggers,
            description: domain::role_description(&input.description, limits)?,
            example_questions: domain::example_questions(&input.example_questions, limits, "example_questions")?,
            updated_at: Utc::now(),
        })
    }

    /// Removes a role; NOT_FOUND when it is not registered.
    pub async fn unregister(&self, role_id: &str) -> Result<u64, TriggersError> {
        let role = RoleId::parse(role_id).map_err(|reason| TriggersError::invalid("role_id", reason))?;
        let version = self
            .store
            .remove(&role)
            .await
            .map_err(TriggersError::StoreUnavailable)?
            .ok_or_else(|| TriggersError::RoleNotFound(role.to_string()))?;
        self.refresh().await?;
        tracing::info!(role_id = %role, version, "role unregistered");
        Ok(version)
    }

    /// Registrations ordered by role id, a page at a time (the token is the last id seen).
    pub fn list(&self, role_filter: &str, page_size: u32, page_token: &str) -> Result<RolePage, TriggersError> {
        const DEFAULT_PAGE: u32 = 100;
        const MAX_PAGE: u32 = 1000;
        if page_size > MAX_PAGE {
            return Err(TriggersError::invalid("page_size", format!("must be at most {MAX_PAGE}, got {page_size}")));
        }
        let page_size = if page_size == 0 { DEFAULT_PAGE } else { page_size } as usize;
        let current = self.current.load();
        if !role_filter.is_empty() {
            let role = RoleId::parse(role_filter).map_err(|reason| TriggersError::invalid("role_id", reason))?;
            let registration = current.roles.get(&role).ok_or_else(|| TriggersError::RoleNotFound(role.to_string()))?;
            return Ok(RolePage {
                roles: vec![(registration.clone(), self.trigger_count(registration))],
                next_page_token: None,
                version: current.version,
            });
        }
        let after = if page_token.is_empty() {
            None
        } else {
            Some(
                RoleId::parse(page_token)
                    .map_err(|_| TriggersError::invalid("page_token", "is not a token this service issued".into()))?,
            )
        };
        let range = match &after {
            Some(after) => {
                current.roles.range::<RoleId, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            }
            None => current.roles.range::<RoleId, _>(..),
        };
        let mut roles: Vec<_> = range.take(page_size + 1).map(|(_, r)| (r.clone(), self.trigger_count(r))).collect();
        let next_page_token = if roles.len() > page_size {
            roles.truncate(page_size);
            roles.last().map(|(r, _)| r.role_id.to_string())
        } else {
            None
        };
        Ok(RolePage { roles, next_page_token, version: current.version })
    }

    /// Distinct triggers a role matches with: its domains' plus its own.
    fn trigger_count(&self, registration: &RoleRegistration) -> u32 {
        let mut distinct: HashSet<(TriggerKind, &str)> = HashSet::new();
        for domain in &registration.domains {
            if let Some(pack) = self.packs.get(domain) {
                distinct.extend(pack.triggers.iter().map(|t| (t.kind, t.pattern.as_str())));
            }
        }
        distinct.extend(registration.custom_triggers.iter().map(|t| (t.kind, t.pattern.as_str())));
        u32::try_from(distinct.len()).unwrap_or(u32::MAX)
    }

    /// Ranks every role for a query and hands the ranking and the registry version to
    /// `use_ranking`. The trigger pass has no I/O and no locks, and borrows from the current
    /// matcher; the semantic signal is consulted (one embedding, or a cache hit) only when
    /// the trigger scores leave the decision open.
    pub async fn detect<R>(
        &self,
        query: &str,
        use_ranking: impl FnOnce(&Ranking<'_>, u64) -> R,
    ) -> Result<R, TriggersError> {
        let query = Query::new(query, &self.config.limits)?;
        let current = self.current.load_full();
        let ranking = self.rank(&current, query, None).await;
        Ok(use_ranking(&ranking, current.version))
    }

    /// The best role for a query with hysteresis towards `current_role_id`, handed with the
    /// ranking and registry version to `use_decision`.
    pub async fn best_role<R>(
        &self,
        query: &str,
        current_role_id: &str,
        hysteresis_ratio: Option<f64>,
        use_decision: impl FnOnce(BestRole, &Ranking<'_>, u64) -> R,
    ) -> Result<R, TriggersError> {
        self.best_role_among(query, current_role_id, hysteresis_ratio, &[], use_decision).await
    }

    /// As [`best_role`](Self::best_role), with only the roles in `candidate_role_ids` competing
    /// when it is not empty: one tenant's view of a registry that holds every tenant's roles,
    /// so another tenant's role can neither be chosen nor crowd out this tenant's.
    pub async fn best_role_among<R>(
        &self,
        query: &str,
        current_role_id: &str,
        hysteresis_ratio: Option<f64>,
        candidate_role_ids: &[String],
        use_decision: impl FnOnce(BestRole, &Ranking<'_>, u64) -> R,
    ) -> Result<R, TriggersError> {
        let query = Query::new(query, &self.config.limits)?;
        let candidates = candidates(candidate_role_ids)?;
        let ratio = match hysteresis_ratio {
            Some(ratio) if !(0.0..=1.0).contains(&ratio) || ratio.is_nan() => {
                return Err(TriggersError::invalid(
                    "hysteresis_ratio",
                    format!("must be between 0 and 1, got {ratio}"),
                ));
            }
            Some(ratio) => ratio,
            None => self.config.hysteresis_ratio,
        };
        let current = self.current.load_full();
        let current_role = if current_role_id.is_empty() {
            None
        } else {
            let role =
                RoleId::parse(current_role_id).map_err(|reason| TriggersError::invalid("current_role_id", reason))?;
            if !current.roles.contains_key(&role) {
                return Err(TriggersError::RoleNotFound(role.to_string()));
            }
            Some(role)
        };
        let ranking = self.rank(&current, query, candidates.as_ref()).await;
        let best = hysteresis::best_role(&ranking, current_role.as_ref(), ratio);
        Ok(use_decision(best, &ranking, current.version))
    }

    /// The trigger scores, blended with the semantic signal when they are not clear; only
    /// `candidates`' when given.
    async fn rank<'c>(
        &self,
        compiled: &'c Compiled,
        query: Query<'_>,
        candidates: Option<&HashSet<RoleId>>,
    ) -> Ranking<'c> {
        let competes = |role: &RoleId| candidates.is_none_or(|ids| ids.contains(role));
        let mut scores = compiled.matcher.detect(query.as_str());
        scores.retain(|score| competes(score.role_id));
        let role_count = compiled.roles.keys().filter(|role| competes(role)).count();
        let semantic = &self.config.semantic;
        if semantic.is_clear(&scores, role_count) {
            return Ranking::triggers_only(scores, SemanticState::NotNeeded);
        }
        let Some(index) = compiled.semantic.as_ref().filter(|index| !index.is_empty()) else {
            let state = match self.model.state() {
                ModelState::Loading => SemanticState::Loading,
                ModelState::Ready if compiled.semantic.is_some() => SemanticState::NotNeeded,
                // Loaded, but this version was compiled before it was: indexing follows.
                ModelState::Ready => SemanticState::Loading,
                ModelState::Off | ModelState::Unavailable(_) => SemanticState::Unavailable,
            };
            return Ranking::triggers_only(scores, state);
        };
        match self.model.embed_query(query.as_str()).await {
            Ok(Some(vector)) => {
                let mut similarities = index.similarities(&vector, semantic.nearest);
                similarities.roles.retain(|similarity| competes(similarity.role_id));
                Ranking::blended(scores, similarities, semantic)
            }
            Ok(None) => Ranking::triggers_only(scores, SemanticState::Unavailable),
            Err(err) => {
                tracing::warn!(error = %err, "embedding the query failed; deciding by triggers alone");
                Ranking::triggers_only(scores, SemanticState::Unavailable)
            }
        }
    }
}

/// Most roles one decision may be limited to.
const MAX_CANDIDATES: usize = 10_000;

/// The roles a caller limited a decision to; `None` when it named none.
fn candidates(ids: &[String]) -> Result<Option<HashSet<RoleId>>, TriggersError> {
    if ids.is_empty() {
        return Ok(None);
    }
    if ids.len() > MAX_CANDIDATES {
        return Err(TriggersError::invalid(
            "candidate_role_ids",
            format!("{} given, at most {MAX_CANDIDATES}", ids.len()),
        ));
    }
    ids.iter()
        .enumerate()
        .map(|(index, id)| {
            RoleId::parse(id).map_err(|reason| TriggersError::invalid(format!("candidate_role_ids[{index}]"), reason))
        })
        .collect::<Result<HashSet<_>, _>>()
        .map(Some)
}

async fn compile(
    snapshot: Snapshot,
    packs: Arc<DomainPacks>,
    scoring: Scoring,
    model: Arc<SemanticModel>,
) -> Result<Compiled, TriggersError> {
    tokio::task::spawn_blocking(move || {
        let matcher = Matcher::build(&snapshot.roles, &packs, scoring).map_err(TriggersError::Matcher)?;
        let semantic = index_exemplars(&snapshot.roles, &packs, &model);
        let roles = snapshot.roles.into_iter().map(|r| (r.role_id.clone(), r)).collect();
        Ok(Compiled { version: snapshot.version, roles, matcher, semantic })
    })
    .await
    .map_err(|err| TriggersError::Matcher(format!("matcher build task failed: {err}")))?
}

/// The roles' exemplar index, embedding only texts not embedded before (a new role's own
/// questions; the domains' once per process). `None` without a model, or when embedding fails
/// (logged: detection goes on by triggers alone).
fn index_exemplars(roles: &[RoleRegistration], packs: &DomainPacks, model: &SemanticModel) -> Option<SemanticIndex> {
    let embedder = model.embedder()?;
    let texts = SemanticIndex::texts(roles, packs);
    let cache = model.exemplars();
    if let Err(err) = cache.fill(&embedder, &texts) {
        tracing::warn!(error = %err, "embedding exemplars failed; the semantic signal is off for this version");
        return None;
    }
    // The domain packs' texts stay whether or not a role uses them yet: they are embedded (or
    // read from the kept file) once per process, and a role registered later for another
    // domain must not embed that domain's exemplars again on the registration's path.
    let pack_texts = SemanticIndex::pack_texts(packs);
    let keep = texts.iter().chain(&pack_texts).map(String::as_str).collect();
    cache.retain(&keep);
    Some(SemanticIndex::build(roles, packs, cache))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(id: &str, domain: &str) -> RoleRegistration {
        RoleRegistration {
            role_id: RoleId::parse(id).expect("valid id"),
            domains: vec![domain.to_owned()],
            custom_triggers: Vec::new(),
            description: format!("The {domain} role"),
            example_questions: Vec::new(),
            updated_at: chrono::Utc::now(),
        }
    }

    /// Found when the packs' vectors came from the kept file and the model was ready before
    /// sessions registered its roles: each rebuild dropped the packs its roles did not use yet,
    /// so the next role's registration embedded its domain's exemplars again on the request
    /// path (seconds each, past a caller's deadline). The packs' texts now stay.
    #[test]
    fn a_rebuild_keeps_every_packs_vectors_for_roles_registered_later() {
        let model =
            SemanticModel::load(&switchyard_testkit::model_dir(), 0).expect("the model (scripts/fetch-models.sh)");
        let packs = DomainPacks::builtin().expect("packs");
        let pack_texts = SemanticIndex::pack_texts(&packs);
        let embedder = model.embedder().expect("loaded");
        model.exemplars().fill(&embedder, &pack_texts).expect("embed the packs");

        let finance = [role("finance-expert", "finance")];
        let index = index_exemplars(&finance, &packs, &model).expect("an index");
        assert_eq!(index.role_count(), 1);
        assert!(model.exemplars().covers(&pack_texts), "a rebuild for one domain dropped the other packs' vectors");

        let own = "The finance role".to_owned();
        assert!(model.exemplars().covers(std::slice::from_ref(&own)), "the role's own description is embedded");
        // A role's own texts go with it once it is gone; the packs' stay.
        index_exemplars(&[role("legal-expert", "legal")], &packs, &model).expect("an index");
        assert!(!model.exemplars().covers(std::slice::from_ref(&own)));
        assert!(model.exemplars().covers(&pack_texts));
    }
}
