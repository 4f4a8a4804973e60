//! This replica's last known (role, switch count, owner) per session: a hint that lets a turn
//! that keeps the role skip reading the session first (the owner, so that the skipped read
//! still never lets another user in). Bounded: when full it starts over (a
//! missing hint only means one extra read).

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

use crate::domain::{RoleId, SessionKey, UserId};

/// What a hint knows of a session: its role, switch count and owner.
pub type Hint = (RoleId, u64, Option<UserId>);

/// Sessions remembered before the hints start over.
const CAPACITY: usize = 100_000;

pub struct SessionHints {
    known: Mutex<HashMap<SessionKey, Hint>>,
    capacity: usize,
}

impl Default for SessionHints {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl SessionHints {
    fn with_capacity(capacity: usize) -> Self {
        Self { known: Mutex::default(), capacity }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionKey, Hint>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &SessionKey) -> Option<Hint> {
        self.lock().get(key).cloned()
    }

    pub fn remember(&self, key: &SessionKey, role: RoleId, switch_count: u64, owner: Option<UserId>) {
        let mut known = self.lock();
        if known.len() >= self.capacity && !known.contains_key(key) {
            known.clear();
        }
        known.insert(key.clone(), (role, switch_count, owner));
    }

    pub fn forget(&self, key: &SessionKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{SessionId, TenantId};

    fn key(id: &str) -> SessionKey {
        SessionKey { tenant: TenantId::default_tenant(), id: SessionId::parse(id).unwrap() }
    }

    fn role(id: &str) -> RoleId {
        RoleId::parse(id).unwrap()
    }

    #[test]
    fn remembers_the_latest_state_until_forgotten() {
        let hints = SessionHints::default();
        assert_eq!(hints.get(&key("a")), None);
        hints.remember(&key("a"), role("tech-expert"), 1, None);
        let ann = UserId::parse("ann").ok();
        hints.remember(&key("a"), role("finance-expert"), 2, ann.clone());
        assert_eq!(hints.get(&key("a")), Some((role("finance-expert"), 2, ann)));
        hints.forget(&key("a"));
        assert_eq!(hints.get(&key("a")), None);
    }

    #[test]
    fn a_full_table_starts_over_but_updates_in_place() {
        let hints = SessionHints::with_capacity(2);
        hints.remember(&key("a"), role("tech-expert"), 0, None);
        hints.remember(&key("b"), role("tech-expert"), 0, None);
        hints.remember(&key("b"), role("finance-expert"), 1, None);
        assert!(hints.get(&key("a")).is_some(), "updating a known session keeps the others");
        hints.remember(&key("c"), role("tech-expert"), 0, None);
        assert_eq!(hints.get(&key("a")), None);
        assert_eq!(hints.get(&key("c")), Some((role("tech-expert"), 0, None)));
    }
}
