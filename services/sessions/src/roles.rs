//! The role catalog: expert roles in the role store, cached in memory for the request path,
//! and always registered with the triggers service. Roles have tenants: every tenant sees the
//! built-in roles and its own, never another tenant's.
//!
//! A role never exists without its triggers: a create or update registers the triggers
//! *first* and fails (UNAVAILABLE, or INVALID_ARGUMENT for a pattern the triggers service
//! rejects) when registration fails, leaving nothing stored. If the store write then fails,
//! the registration is undone (create) or the previous triggers restored (update). The two
//! services cannot drift apart for long: at start every role is registered again (retrying
//! in the background until the triggers service answers), and whenever the triggers service
//! says it does not know a role, [`RoleCatalog::ensure_registered`] registers them all again.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
    time::Duration,
};

use chrono::Utc;
use switchyard_kit::{
    backoff::Backoff,
    text::{reject_nul, reject_nul_in},
};

use crate::{
    clients::{TriggersClient, TriggersError, registry_id},
    defaults,
    domain::{CustomTrigger, Role, RoleId, TenantId, TriggerKind, parse_role_id},
    error::SessionsError,
    paging::{self, ROLES_PAGE},
    store::RoleStore,
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

/// The roles in memory: the built-in ones and each tenant's own.
#[derive(Default)]
struct Roles {
    builtin: BTreeMap<RoleId, Role>,
    tenants: HashMap<TenantId, BTreeMap<RoleId, Role>>,
}

impl Roles {
    fn new(roles: Vec<Role>) -> Self {
        let mut all = Self::default();
        for role in roles {
            all.put(role);
        }
        all
    }

    fn put(&mut self, role: Role) {
        match role.tenant.clone() {
            None => self.builtin.insert(role.id.clone(), role),
            Some(tenant) => self.tenants.entry(tenant).or_default().insert(role.id.clone(), role),
        };
    }

    fn remove(&mut self, tenant: &TenantId, id: &RoleId) {
        if let Some(own) = self.tenants.get_mut(tenant) {
            own.remove(id);
            if own.is_empty() {
                self.tenants.remove(tenant);
            }
        }
    }

    /// The role `tenant` sees as `id`: its own, else the built-in one.
    fn get(&self, tenant: &TenantId, id: &RoleId) -> Option<&Role> {
        self.tenants.get(tenant).and_then(|own| own.get(id)).or_else(|| self.builtin.get(id))
    }

    /// Every role `tenant` sees, ordered by id.
    fn visible(&self, tenant: &TenantId) -> BTreeMap<&RoleId, &Role> {
        let mut visible: BTreeMap<&RoleId, &Role> = self.builtin.iter().collect();
        if let Some(own) = self.tenants.get(tenant) {
            visible.extend(own.iter());
        }
        visible
    }

    fn all(&self) -> Vec<Role> {
        self.builtin.values().chain(self.tenants.values().flat_map(BTreeMap::values)).cloned().collect()
    }
}

/// Every tenant sees the built-in roles (shared, read-only) and its own roles, which no other
/// tenant sees. A tenant's role may carry a built-in's id: updating a built-in makes the
/// tenant's own copy (an override), and deleting that copy brings the built-in back.
pub struct RoleCatalog {
    store: Arc<dyn RoleStore>,
    triggers: TriggersClient,
    cache: RwLock<Roles>,
    write_lock: tokio::sync::Mutex<()>,
    /// Serialises full re-registrations; the counter lets callers that waited for one in
    /// progress return instead of repeating it.
    resync: tokio::sync::Mutex<()>,
    resyncs: std::sync::atomic::AtomicU64,
    /// Every role has been registered with the triggers service since start.
    registered: std::sync::atomic::AtomicBool,
}

impl RoleCatalog {
    /// Loads the roles, seeding the built-in ones on first start (none stored), and starts
    /// registering every role with the triggers service in the background.
    pub async fn open(store: Arc<dyn RoleStore>, triggers: TriggersClient) -> Result<Arc<Self>, SessionsError> {
        let mut roles = store.list().await.map_err(|err| SessionsError::unavailable("loading roles", err))?;
        if !roles.iter().any(|role| role.tenant.is_none()) {
            for role in defaults::default_roles() {
                store.insert(&role).await.map_err(|err| SessionsError::unavailable("seeding default roles", err))?;
            }
            roles = store.list().await.map_err(|err| SessionsError::unavailable("loading roles", err))?;
            tracing::info!(roles = roles.len(), "default roles seeded");
        }
        let catalog = Arc::new(Self {
            store,
            triggers,
            cache: RwLock::new(Roles::new(roles)),
            write_lock: tokio::sync::Mutex::new(()),
            resync: tokio::sync::Mutex::new(()),
            resyncs: std::sync::atomic::AtomicU64::new(0),
            registered: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(register_all(Arc::downgrade(&catalog)));
        Ok(catalog)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Roles> {
        self.cache.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Roles> {
        self.cache.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether every role has been registered with the triggers service since start (the
    /// service is not ready before: detection would not know the roles).
    pub fn is_registered(&self) -> bool {
        self.registered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The role `tenant` sees as `id` (its own, else the built-in one).
    pub fn get(&self, tenant: &TenantId, id: &RoleId) -> Option<Role> {
        self.read().get(tenant, id).cloned()
    }

    /// A role of `tenant` by id as a caller wrote it; errors name `field`. Another tenant's
    /// role is not found, exactly as one that does not exist.
    pub fn require(&self, tenant: &TenantId, id: &str, field: &str) -> Result<Role, SessionsError> {
        let id = parse_role_id(id, field)?;
        self.get(tenant, &id).ok_or_else(|| SessionsError::RoleNotFound(id.to_string()))
    }

    /// The roles `tenant` sees, by the id the triggers service knows each under: only these
    /// compete for the tenant's sessions.
    pub fn registry_ids(&self, tenant: &TenantId) -> HashMap<String, RoleId> {
        self.read().visible(tenant).into_values().map(|role| (registry_id(role).to_string(), role.id.clone())).collect()
    }

    /// Roles `tenant` sees, ordered by id, optionally only those drawing on `domain`, a page
    /// at a time.
    pub fn list(
        &self,
        tenant: &TenantId,
        domain: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<Role>, Option<String>), SessionsError> {
        let page_size = ROLES_PAGE.size(page_size)? as usize;
        let after = paging::after(page_token, |token| RoleId::parse(token).ok())?;
        let cache = self.read();
        let roles: Vec<Role> = cache
            .visible(tenant)
            .into_values()
            .filter(|role| after.as_ref().is_none_or(|after| &role.id > after))
            .filter(|role| domain.is_empty() || role.domains.iter().any(|d| d == domain))
            .take(page_size + 1)
            .cloned()
            .collect();
        Ok(paging::page(roles, page_size, |role| role.id.to_string()))
    }

    /// Creates a role of `tenant`. An id the tenant already sees (its own, or a built-in
    /// one) is taken: a built-in is customised by updating it.
    pub async fn create(&self, tenant: &TenantId, input: RoleInput) -> Result<Role, SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let now = Utc::now();
        let role = Role { tenant: Some(tenant.clone()), ..validate(input, now, now)? };
        if self.get(tenant, &role.id).is_some() {
            return Err(SessionsError::RoleExists(role.id.to_string()));
        }
        self.insert_registered(&role).await?;
        self.write().put(role.clone());
        tracing::info!(tenant = %tenant, role_id = %role.id, "role created");
        Ok(role)
    }

    /// Registers a new role's triggers, then stores it (undoing the registration when the
    /// store refuses or fails).
    async fn insert_registered(&self, role: &Role) -> Result<(), SessionsError> {
        self.register(role).await?;
        let stored = self.store.insert(role).await;
        if stored.is_err()
            && let Err(undo) = self.triggers.unregister(&registry_id(role)).await
        {
            tracing::warn!(role_id = %role.id, %undo, "could not undo trigger registration of an unsaved role");
        }
        match stored {
            Ok(true) => Ok(()),
            Ok(false) => Err(SessionsError::RoleExists(role.id.to_string())),
            Err(err) => Err(SessionsError::store_write("saving the role", "role", err)),
        }
    }

    /// Applies the fields named in `mask` (every field when empty) from `input` to a role
    /// `tenant` sees. A built-in role is never changed: the result is the tenant's own copy.
    pub async fn update(&self, tenant: &TenantId, input: RoleInput, mask: &[String]) -> Result<Role, SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let id = parse_role_id(&input.id, "role.id")?;
        let current = self.get(tenant, &id).ok_or_else(|| SessionsError::RoleNotFound(id.to_string()))?;
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
        let now = Utc::now();
        if current.tenant.is_none() {
            // The built-in stays as it is for every other tenant.
            let role = Role { tenant: Some(tenant.clone()), ..validate(merged, now, now)? };
            self.insert_registered(&role).await?;
            self.write().put(role.clone());
            tracing::info!(tenant = %tenant, role_id = %role.id, "built-in role overridden for one tenant");
            return Ok(role);
        }
        let role = Role { tenant: Some(tenant.clone()), ..validate(merged, current.created_at, now)? };
        self.register(&role).await?;
        match self.store.update(&role).await {
            Ok(true) => {}
            Ok(false) => return Err(SessionsError::RoleNotFound(role.id.to_string())),
            Err(err) => {
                if let Err(undo) = self.triggers.register(&registry_id(&current), &current).await {
                    tracing::warn!(role_id = %role.id, %undo, "could not restore the previous trigger registration");
                }
                return Err(SessionsError::store_write("saving the role", "role", err));
            }
        }
        self.write().put(role.clone());
        tracing::info!(tenant = %tenant, role_id = %role.id, "role updated");
        Ok(role)
    }

    /// Deletes a role of `tenant` (an override brings the built-in back). Built-in roles are
    /// read-only.
    pub async fn delete(&self, tenant: &TenantId, id: &str) -> Result<(), SessionsError> {
        let _one_writer = self.write_lock.lock().await;
        let id = parse_role_id(id, "role_id")?;
        let role = self.get(tenant, &id).ok_or_else(|| SessionsError::RoleNotFound(id.to_string()))?;
        if role.tenant.is_none() {
            if id.as_str() == crate::defaults::GENERAL_ASSISTANT {
                return Err(SessionsError::RoleProtected(id.to_string()));
            }
            return Err(SessionsError::RoleBuiltIn(id.to_string()));
        }
        let deleted = self
            .store
            .delete(Some(tenant), &id)
            .await
            .map_err(|err| SessionsError::unavailable("deleting the role", err))?;
        if !deleted {
            return Err(SessionsError::RoleNotFound(id.to_string()));
        }
        self.write().remove(tenant, &id);
        // A leftover registration is harmless (no tenant's sessions name it as a candidate)
        // but is tidied up when possible.
        if let Err(err) = self.triggers.unregister(&registry_id(&role)).await {
            tracing::warn!(role_id = %id, %err, "role deleted but its triggers are still registered");
        }
        tracing::info!(tenant = %tenant, role_id = %id, "role deleted");
        Ok(())
    }

    /// Called when the triggers service does not know `tenant`'s role `id`. If the role
    /// exists here, the triggers service has lost its registrations (restarted on an empty
    /// store, say): every role is registered again, so detection sees all of them, not only
    /// this one.
    pub async fn ensure_registered(&self, tenant: &TenantId, id: &RoleId) -> Result<(), SessionsError> {
        use std::sync::atomic::Ordering;
        if self.get(tenant, id).is_none() {
            return Err(SessionsError::RoleNotFound(id.to_string()));
        }
        let seen = self.resyncs.load(Ordering::SeqCst);
        let _one_resync = self.resync.lock().await;
        if self.resyncs.load(Ordering::SeqCst) != seen {
            // Another call re-registered everything while this one waited.
            return Ok(());
        }
        tracing::warn!(role_id = %id, "triggers service did not know a role, registering every role again");
        let roles = self.read().all();
        for role in &roles {
            self.register(role).await?;
        }
        self.resyncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn register(&self, role: &Role) -> Result<(), SessionsError> {
        self.triggers.register(&registry_id(role), role).await.map_err(|err| {
            let logged = err.logged_upstream();
            let passed = match err {
                TriggersError::Rejected { field: Some(field), reason, .. } => {
                    SessionsError::invalid(format!("role.{field}"), reason)
                }
                TriggersError::Rejected { field: None, reason, .. } => SessionsError::invalid("role", reason),
                other => SessionsError::unavailable("registering the role's triggers", other),
            };
            passed.passed_on(logged)
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
                    Ok(roles) => *catalog.write() = Roles::new(roles),
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
        let roles = this.read().all();
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
        reject_nul(&format!("role.{field}"), value)?;
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
    reject_nul_in("role.domains", input.domains.iter().map(String::as_str))?;
    let mut custom_triggers = Vec::with_capacity(input.custom_triggers.len());
    for (index, (pattern, kind, priority)) in input.custom_triggers.into_iter().enumerate() {
        let kind = kind.ok_or_else(|| {
            SessionsError::invalid(format!("role.custom_triggers[{index}].kind"), "must be KEYWORD, PHRASE or REGEX")
        })?;
        reject_nul(&format!("role.custom_triggers[{index}].pattern"), &pattern)?;
        custom_triggers.push(CustomTrigger { pattern, kind, priority });
    }
    let preferred_model = match input.preferred_model {
        Some(model) => Some(text("preferred_model", &model, true, 200)?),
        None => None,
    };
    Ok(Role {
        tenant: None,
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

/// Property-based fuzzing of what callers send the sessions service, in process: roles to
/// create or update, the identity headers every call carries, page sizes and tokens, queries.
/// No panic; a value or an INVALID_ARGUMENT error naming its field; each case within the budget.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use switchyard_kit::{ErrorCode, ServiceError, identity::Identity};
    use switchyard_testkit::fuzz::{config, hostile_text, timed};
    use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};

    use super::*;
    use crate::{
        domain::{SessionLimits, check_query},
        paging::{HISTORY_PAGE, ROLES_PAGE, after, sequence},
    };

    fn text() -> BoxedStrategy<String> {
        prop_oneof![3 => hostile_text(), 1 => "[a-z0-9._-]{1,70}", 1 => "[ -~]{0,300}"].boxed()
    }

    fn kind() -> impl Strategy<Value = Option<TriggerKind>> {
        proptest::option::of(prop_oneof![
            Just(TriggerKind::Keyword),
            Just(TriggerKind::Phrase),
            Just(TriggerKind::Regex)
        ])
    }

    fn role_input() -> impl Strategy<Value = RoleInput> {
        (
            text(),
            text(),
            text(),
            proptest::collection::vec(text(), 0..20),
            prop_oneof![text(), (15_000usize..17_000).prop_map(|n| "a ".repeat(n))],
            proptest::collection::vec((text(), kind(), any::<u32>()), 0..8),
            proptest::option::of(text()),
        )
            .prop_map(|(id, name, description, domains, system_prompt, custom_triggers, preferred_model)| {
                RoleInput { id, name, description, domains, system_prompt, custom_triggers, preferred_model }
            })
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_role_is_valid_or_refused_by_field(input in role_input()) {
            let now = Utc::now();
            match timed("validating a role", || validate(input, now, now)) {
                Ok(role) => {
                    prop_assert!(role.name.len() <= 200 && role.description.len() <= 2000);
                    prop_assert!(role.system_prompt.len() <= 32 * 1024 && role.domains.len() <= 16);
                }
                Err(error) => {
                    prop_assert_eq!(error.code(), ErrorCode::InvalidArgument, "{}", error);
                    prop_assert!(error.field().is_some_and(|field| field.starts_with("role.")), "{}", error);
                }
            }
        }

        /// The identity headers, as raw bytes an HTTP/2 peer may send (any visible byte).
        #[test]
        fn any_identity_headers_are_an_identity_or_refused_by_header(
            headers in proptest::collection::vec(
                (
                    prop_oneof![Just("x-tenant-id"), Just("x-user-id"), Just("x-switchyard-admin")],
                    proptest::collection::vec(prop_oneof![32u8..127, 128u8..=255, Just(b'\t')], 0..200),
                ),
                0..5,
            ),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    map.append(HeaderName::from_static(name), value);
                }
            }
            match timed("reading identity headers", || Identity::from_headers(&map)) {
                Ok(identity) => prop_assert!(identity.tenant.as_str().len() <= 64),
                Err(error) => prop_assert!(error.field.starts_with("x-"), "{}", error.field),
            }
        }

        #[test]
        fn any_page_and_query_is_served_or_refused_by_field(
            size in any::<u32>(),
            token in prop_oneof![text(), any::<u64>().prop_map(|n| n.to_string()), Just("-1".to_owned())],
            query in prop_oneof![text(), (8_000usize..8_500).prop_map(|n| "a ".repeat(n))],
        ) {
            for limits in [HISTORY_PAGE, ROLES_PAGE] {
                match limits.size(size) {
                    Ok(served) => prop_assert!((1..=limits.max).contains(&served)),
                    Err(error) => prop_assert_eq!(error.field(), Some("page_size")),
                }
            }
            if let Err(error) = after(&token, sequence) {
                prop_assert_eq!(error.field(), Some("page_token"));
            }
            if let Err(error) = check_query(&query, &SessionLimits::default()) {
                prop_assert_eq!(error.field.as_str(), "query");
            }
        }
    }
}
