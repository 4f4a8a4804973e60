//! The role catalogue: expert roles in the role store, cached in memory for the request path,
//! and always registered with the triggers service.
//!
//! A role never exists without its triggers: a create or update registers the triggers
//! *first* and fails (UNAVAILABLE, or INVALID_ARGUMENT for a pattern the triggers service
//! rejects) when registration fails, leaving nothing stored. If the store write then fails,
//! the registration is undone (create) or the previous triggers restored (update). The two
//! services cannot drift apart for long: at start every role is registered again (retrying
//! in the background until the triggers service answers), and whenever the triggers service
//! says it does not know a role, [`RoleCatalog::ensure_registered`] registers them all again.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use chrono::Utc;
use switchyard_kit::backoff::Backoff;

use crate::{
    defaults,
    domain::{CustomTrigger, Role, RoleId, TriggerKind, parse_role_id},
    error::SessionsError,
    paging::{self, ROLES_PAGE},
    store::RoleStore,
    triggers::{TriggersClient, TriggersError},
};

/// A role as a caller submits it, before validation.
#[derive(Debug, Clone, Default)]
pub struct RoleInput {
    pub id: String,
    pub name: String,
    pub description: String,
    pub domains: Vec<String>,
    pub system_prompt: String,
    /// `(pattern, kind, priority)`; kind `None` when the caller left it unspecified.
    pub custom_triggers: Vec<(String, Option<TriggerKind>, u32)>,
    pub preferred_model: Option<String>,
}

/// Fields an update may name in its mask.
const UPDATABLE: [&str; 6] = ["name", "description", "domains", "system_prompt", "custom_triggers", "preferred_model"];

pub struct RoleCatalog {
    store: Arc<dyn RoleStore>,
    triggers: TriggersClient,
    cache: RwLock<BTreeMap<RoleId, Role>>,
    write_lock: tokio::sync::Mutex<()>,
    /// Serialises full re-registrations; the counter lets callers that waited for one in
    /// progress return instead of repeating it.
    resync: tokio::sync::Mutex<()>,
    resyncs: std::sync::atomic::AtomicU64,
    /// Every role has been registered with the triggers service since start.
    registered: std::sync::atomic::AtomicBool,
}

impl RoleCatalog {
    /// Loads the roles, seeding the defaults on first start (an empty store), and starts
    /// registering every role with the triggers service in the background.
    pub async fn open(store: Arc<dyn RoleStore>, triggers: TriggersClient) -> Result<Arc<Self>, SessionsError> {
        let mut roles = store.list().await.map_err(|err| SessionsError::unavailable("loading roles", err))?;
        if roles.is_empty() {
            for role in defaults::default_roles() {
                store.insert(&role).await.map_err(|err| SessionsError::unavailable("seeding default roles", err))?;
            }
            roles = store.list().await.map_err(|err| SessionsError::unavailable("loading roles", err))?;
            tracing::info!(roles = roles.len(), "default roles seeded");
        }
        let catalog = Arc::new(Self {
            store,
            triggers,
            cache: RwLock::new(roles.into_iter().map(|r| (r.id.clone(), r)).collect()),
            write_lock: tokio::sync::Mutex::new(()),
            resync: tokio::sync::Mutex::new(()),
            resyncs: std::sync::atomic::AtomicU64::new(0),
            registered: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(register_all(Arc::downgrade(&catalog)));
        Ok(catalog)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<RoleId, Role>> {
        self.cache.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<RoleId, Role>> {
        self.cache.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether every role has been registered with the triggers service since start (the
    /// service is not ready before: detection would not know the roles).
    pub fn is_registered(&self) -> bool {
        self.registered.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn get(&self, id: &RoleId) -> Option<Role> {
        self.read().get(id).cloned()
    }

    /// A role by id as a caller wrote it; errors name `field`.
    pub fn require(&self, id: &str, field: &str) -> Result<Role, SessionsError> {
        let id = parse_role_id(id, field)?;
        self.get(&id).ok_or_else(|| SessionsError::RoleNotFound(id.to_string()))
    }

    /// Roles ordered by id, optionally only those drawing on `domain`, a page at a time.
    pub fn list(
        &self,
        domain: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<Role>, Option<String>), SessionsError> {
        let page_size = ROLES_PAGE.size(page_size)? as usize;
        let after = paging::after(page_token, |token| RoleId::parse(token).ok())?;
        let cache = self.read();
        let roles: Vec<Role> = cache
            .values()
            .filter(|role| after.as_ref().is_none_or(|after| &role.id > after))
            .filter(|role| domain.is_empty() || role.domains.iter().any(|d| d == domain))
            .take(page_size + 1)
            .cloned()
            .collect();
        Ok(paging::page(roles, page_size, |role| role.id.to_string()))
    }

    pub async fn create(&self, input: RoleInput) -> Result<Role, SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let now = Utc::now();
        let role = validate(input, now, now)?;
        if self.get(&role.id).is_some() {
            return Err(SessionsError::RoleExists(role.id.to_string()));
        }
        self.register(&role).await?;
        match self.store.insert(&role).await {
            Ok(true) => {}
            Ok(false) => return Err(SessionsError::RoleExists(role.id.to_string())),
            Err(err) => {
                if let Err(undo) = self.triggers.unregister(&role.id).await {
                    tracing::warn!(role_id = %role.id, %undo, "could not undo trigger registration of an unsaved role");
                }
                return Err(SessionsError::unavailable("saving the role", err));
            }
        }
        self.write().insert(role.id.clone(), role.clone());
        tracing::info!(role_id = %role.id, "role created");
        Ok(role)
    }

    /// Applies the fields named in `mask` (every field when empty) from `input`.
    pub async fn update(&self, input: RoleInput, mask: &[String]) -> Result<Role, SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let id = parse_role_id(&input.id, "role.id")?;
        let current = self.get(&id).ok_or_else(|| SessionsError::RoleNotFound(id.to_string()))?;
        for (index, path) in mask.iter().enumerate() {
            if !UPDATABLE.contains(&path.as_str()) {
                return Err(SessionsError::invalid(
                    format!("update_mask.paths[{index}]"),
                    format!("`{path}` cannot be updated (updatable: {})", UPDATABLE.join(", ")),
                ));
            }
        }
        let wants = |field: &str| mask.is_empty() || mask.iter().any(|p| p == field);
        let merged = RoleInput {
            id: input.id.clone(),
            name: if wants("name") { input.name } else { current.name.clone() },
            description: if wants("description") { input.description } else { current.description.clone() },
            domains: if wants("domains") { input.domains } else { current.domains.clone() },
            system_prompt: if wants("system_prompt") { input.system_prompt } else { current.system_prompt.clone() },
            custom_triggers: if wants("custom_triggers") {
                input.custom_triggers
            } else {
                current.custom_triggers.iter().map(|t| (t.pattern.clone(), Some(t.kind), t.priority)).collect()
            },
            preferred_model: if wants("preferred_model") {
                input.preferred_model
            } else {
                current.preferred_model.clone()
            },
        };
        let role = validate(merged, current.created_at, Utc::now())?;
        self.register(&role).await?;
        match self.store.update(&role).await {
            Ok(true) => {}
            Ok(false) => return Err(SessionsError::RoleNotFound(role.id.to_string())),
            Err(err) => {
                if let Err(undo) = self.triggers.register(&current).await {
                    tracing::warn!(role_id = %role.id, %undo, "could not restore the previous trigger registration");
                }
                return Err(SessionsError::unavailable("saving the role", err));
            }
        }
        self.write().insert(role.id.clone(), role.clone());
        tracing::info!(role_id = %role.id, "role updated");
        Ok(role)
    }

    pub async fn delete(&self, id: &str) -> Result<(), SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let id = parse_role_id(id, "role_id")?;
        if id.as_str() == crate::defaults::GENERAL_ASSISTANT {
            return Err(SessionsError::RoleProtected(id.to_string()));
        }
        let deleted =
            self.store.delete(&id).await.map_err(|err| SessionsError::unavailable("deleting the role", err))?;
        if !deleted {
            return Err(SessionsError::RoleNotFound(id.to_string()));
        }
        self.write().remove(&id);
        // A leftover registration is harmless (sessions ignore roles they do not know) but is
        // tidied up when possible.
        if let Err(err) = self.triggers.unregister(&id).await {
            tracing::warn!(role_id = %id, %err, "role deleted but its triggers are still registered");
        }
        tracing::info!(role_id = %id, "role deleted");
        Ok(())
    }

    /// Called when the triggers service does not know role `id`. If the role exists here, the
    /// triggers service has lost its registrations (restarted on an empty store, say): every
    /// role is registered again, so detection sees all of them, not only this one.
    pub async fn ensure_registered(&self, id: &RoleId) -> Result<(), SessionsError> {
        use std::sync::atomic::Ordering;
        if self.get(id).is_none() {
            return Err(SessionsError::RoleNotFound(id.to_string()));
        }
        let seen = self.resyncs.load(Ordering::SeqCst);
        let _one_resync = self.resync.lock().await;
        if self.resyncs.load(Ordering::SeqCst) != seen {
            // Another call re-registered everything while this one waited.
            return Ok(());
        }
        tracing::warn!(role_id = %id, "triggers service did not know a role, registering every role again");
        let roles: Vec<Role> = self.read().values().cloned().collect();
        for role in &roles {
            self.register(role).await?;
        }
        self.resyncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn register(&self, role: &Role) -> Result<(), SessionsError> {
        self.triggers.register(role).await.map_err(|err| match err {
            TriggersError::Rejected { field: Some(field), reason } => {
                SessionsError::invalid(format!("role.{field}"), reason)
            }
            TriggersError::Rejected { field: None, reason } => SessionsError::invalid("role", reason),
            other => SessionsError::unavailable("registering the role's triggers", other),
        })
    }

    /// Reloads the cache from the store every `interval`, picking up other replicas' changes.
    pub fn spawn_refresh(self: &Arc<Self>, interval: Duration) {
        let catalog = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(catalog) = catalog.upgrade() else { return };
                match catalog.store.list().await {
                    Ok(roles) => *catalog.write() = roles.into_iter().map(|r| (r.id.clone(), r)).collect(),
                    Err(err) => tracing::debug!(%err, "role refresh failed"),
                }
            }
        });
    }
}

/// Registers every role until the triggers service has taken them all.
async fn register_all(catalog: std::sync::Weak<RoleCatalog>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        let Some(this) = catalog.upgrade() else { return };
        let roles: Vec<Role> = this.read().values().cloned().collect();
        let mut failed = 0;
        for role in &roles {
            if let Err(err) = this.register(role).await {
                failed += 1;
                tracing::debug!(role_id = %role.id, %err, "registering role with triggers failed");
            }
        }
        if failed == 0 {
            this.registered.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::info!(roles = roles.len(), "all roles registered with the triggers service");
            return;
        }
        drop(this);
        let delay = backoff.next_delay();
        tracing::warn!(failed, retry_in = ?delay, "some roles could not be registered with the triggers service");
        tokio::time::sleep(delay).await;
    }
}

fn validate(
    input: RoleInput,
    created_at: chrono::DateTime<Utc>,
    updated_at: chrono::DateTime<Utc>,
) -> Result<Role, SessionsError> {
    let id = parse_role_id(&input.id, "role.id")?;
    let text = |field: &str, value: &str, required: bool, max: usize| -> Result<String, SessionsError> {
        let value = value.trim();
        if required && value.is_empty() {
            return Err(SessionsError::invalid(format!("role.{field}"), "must not be empty"));
        }
        if value.len() > max {
            return Err(SessionsError::invalid(
                format!("role.{field}"),
                format!("is {} bytes, over the limit of {max}", value.len()),
            ));
        }
        Ok(value.to_owned())
    };
    let name = text("name", &input.name, true, 200)?;
    let description = text("description", &input.description, false, 2000)?;
    let system_prompt = text("system_prompt", &input.system_prompt, true, 32 * 1024)?;
    if input.domains.len() > 16 {
        return Err(SessionsError::invalid("role.domains", format!("{} given, at most 16", input.domains.len())));
    }
    let mut custom_triggers = Vec::with_capacity(input.custom_triggers.len());
    for (index, (pattern, kind, priority)) in input.custom_triggers.into_iter().enumerate() {
        let kind = kind.ok_or_else(|| {
            SessionsError::invalid(format!("role.custom_triggers[{index}].kind"), "must be KEYWORD, PHRASE or REGEX")
        })?;
        custom_triggers.push(CustomTrigger { pattern, kind, priority });
    }
    let preferred_model = match input.preferred_model {
        Some(model) => Some(text("preferred_model", &model, true, 200)?),
        None => None,
    };
    Ok(Role {
        id,
        name,
        description,
        domains: input.domains.iter().map(|d| d.trim().to_lowercase()).collect(),
        system_prompt,
        custom_triggers,
        preferred_model,
        created_at,
        updated_at,
    })
}
