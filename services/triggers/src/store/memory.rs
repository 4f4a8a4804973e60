//! A registry kept in memory: for `switchyard dev` and tests. Lost on restart.

use std::{collections::BTreeMap, sync::Mutex};

use async_trait::async_trait;
use tokio::sync::watch;

use super::{Snapshot, StoreError, TriggerStore};
use crate::domain::{RoleId, RoleRegistration};

pub struct MemoryStore {
    state: Mutex<State>,
    versions: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    version: u64,
    roles: BTreeMap<RoleId, RoleRegistration>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self { state: Mutex::new(State::default()), versions: watch::Sender::new(0) }
    }
}

impl MemoryStore {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a poisoned lock still holds a
        // consistent value.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl TriggerStore for MemoryStore {
    async fn load(&self) -> Result<Snapshot, StoreError> {
        let state = self.state();
        Ok(Snapshot { version: state.version, roles: state.roles.values().cloned().collect() })
    }

    async fn upsert(&self, registration: &RoleRegistration) -> Result<u64, StoreError> {
        let version = {
            let mut state = self.state();
            state.roles.insert(registration.role_id.clone(), registration.clone());
            state.version += 1;
            state.version
        };
        self.versions.send_replace(version);
        Ok(version)
    }

    async fn remove(&self, role: &RoleId) -> Result<Option<u64>, StoreError> {
        let version = {
            let mut state = self.state();
            if state.roles.remove(role).is_none() {
                return Ok(None);
            }
            state.version += 1;
            state.version
        };
        self.versions.send_replace(version);
        Ok(Some(version))
    }

    fn versions(&self) -> watch::Receiver<u64> {
        self.versions.subscribe()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
