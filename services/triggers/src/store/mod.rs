//! Where role registrations live: Postgres in production, memory in `switchyard dev` and unit
//! tests. Both publish the registry version on a watch channel, so every replica notices a
//! change (its own or another replica's) and rebuilds its matcher.

use async_trait::async_trait;
use tokio::sync::watch;

use crate::domain::{RoleId, RoleRegistration};

pub mod memory;
pub mod postgres;

pub use memory::MemoryStore;
pub use postgres::PostgresStore;

pub use switchyard_kit::store::StoreError;

/// All registrations at one version.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub version: u64,
    pub roles: Vec<RoleRegistration>,
}

#[async_trait]
pub trait TriggerStore: Send + Sync + 'static {
    /// Every registration, ordered by role id, with the version they make up.
    async fn load(&self) -> Result<Snapshot, StoreError>;

    /// Inserts or replaces a role's registration; returns the new registry version.
    async fn upsert(&self, registration: &RoleRegistration) -> Result<u64, StoreError>;

    /// Removes a role; the new version, or `None` when it was not registered.
    async fn remove(&self, role: &RoleId) -> Result<Option<u64>, StoreError>;

    /// The latest known registry version, updated on every change by any replica.
    fn versions(&self) -> watch::Receiver<u64>;

    /// Whether the store answers (for health).
    async fn ping(&self) -> Result<(), StoreError>;
}
