//! This replica's last known (role, switch count, owner) per session: a hint that lets a turn
//! that keeps the role skip reading the session first (the owner, so that the skipped read
//! still never lets another user in). A missing hint only means one extra read, so the table
//! keeps only sessions in conversation: a hint unused for [`IDLE`] is dropped at the next sweep
//! (sessions live for hours or days: a table holding every one this replica ever saw grew with
//! them until it was full), and a full table starts over.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use crate::domain::{RoleId, SessionKey, UserId};

/// What a hint knows of a session: its role, switch count and owner.
pub type Hint = (RoleId, u64, Option<UserId>);

/// Sessions remembered before the hints start over.
const CAPACITY: usize = 100_000;

/// A hint unused for this long is dropped: an agent's next turn comes within seconds, a
/// person's usually within a minute or two; a turn that comes later pays one read of the
/// session (a Redis round trip), and the table holds only the sessions of the last two minutes.
pub const IDLE: Duration = Duration::from_secs(2 * 60);

/// How often `remember` sweeps out idle hints (a sweep walks the whole table).
const SWEEP_EVERY: Duration = Duration::from_secs(30);

pub struct SessionHints {
    known: Mutex<Known>,
    capacity: usize,
}

struct Known {
    hints: HashMap<SessionKey, (Hint, Instant)>,
    swept: Instant,
}

impl Default for SessionHints {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl SessionHints {
    fn with_capacity(capacity: usize) -> Self {
        Self { known: Mutex::new(Known { hints: HashMap::new(), swept: Instant::now() }), capacity }
    }

    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &SessionKey) -> Option<Hint> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &SessionKey, now: Instant) -> Option<Hint> {
        let mut known = self.lock();
        let (hint, used) = known.hints.get_mut(key)?;
        *used = now;
        Some(hint.clone())
    }

    pub fn remember(&self, key: &SessionKey, role: RoleId, switch_count: u64, owner: Option<UserId>) {
        self.remember_at(key, (role, switch_count, owner), Instant::now());
    }

    fn remember_at(&self, key: &SessionKey, hint: Hint, now: Instant) {
        let mut known = self.lock();
        if now.saturating_duration_since(known.swept) >= SWEEP_EVERY {
            known.hints.retain(|_, (_, used)| now.saturating_duration_since(*used) < IDLE);
            // The table's memory follows the sessions in conversation down as well as up.
            if known.hints.capacity() > 4 * known.hints.len().max(64) {
                known.hints.shrink_to_fit();
            }
            known.swept = now;
        }
        if known.hints.len() >= self.capacity && !known.hints.contains_key(key) {
            known.hints.clear();
        }
        known.hints.insert(key.clone(), (hint, now));
    }

    pub fn forget(&self, key: &SessionKey) {
        self.lock().hints.remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().hints.len()
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

    #[test]
    fn hints_unused_for_the_idle_time_are_swept_out() {
        let hints = SessionHints::default();
        let start = Instant::now();
        let hint = || (role("tech-expert"), 0, None);
        hints.remember_at(&key("quiet"), hint(), start);
        hints.remember_at(&key("talking"), hint(), start);
        // "talking" is read (its next turn) within the idle time; "quiet" is not.
        let later = start + IDLE - Duration::from_secs(30);
        assert!(hints.get_at(&key("talking"), later).is_some());
        // The first remember a sweep interval after the idle time drops "quiet" alone.
        hints.remember_at(&key("new"), hint(), start + IDLE + SWEEP_EVERY);
        assert_eq!(hints.get(&key("quiet")), None, "idle for longer than IDLE");
        assert!(hints.get(&key("talking")).is_some(), "used within IDLE");
        assert_eq!(hints.len(), 2);
    }

    #[test]
    fn sweeps_come_at_most_once_per_sweep_interval() {
        let hints = SessionHints::default();
        let start = Instant::now() + SWEEP_EVERY;
        let hint = || (role("tech-expert"), 0, None);
        hints.remember_at(&key("a"), hint(), start);
        // A sweep 10 s before "a" goes idle keeps it ...
        hints.remember_at(&key("b"), hint(), start + IDLE - Duration::from_secs(10));
        // ... and 20 s later "a" is idle, but the next sweep is not due: still there.
        hints.remember_at(&key("c"), hint(), start + IDLE + Duration::from_secs(10));
        assert_eq!(hints.len(), 3);
        // The sweep a whole interval after the last one drops it.
        hints.remember_at(&key("d"), hint(), start + IDLE - Duration::from_secs(10) + SWEEP_EVERY);
        assert_eq!(hints.get(&key("a")), None);
        assert_eq!(hints.len(), 3);
    }
}
