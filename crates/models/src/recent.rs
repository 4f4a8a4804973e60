//! A bounded cache of recent queries' vectors. Conversations repeat themselves ("thanks",
//! the same question retried, a load balancer's health query, an agent setting the same
//! context on every turn), and an embedding costs about 10 ms of CPU against microseconds for
//! the lookup. Triggers and the MCP gateway keep one each.
//!
//! Two generations instead of a least-recently-used list: lookups and inserts are O(1) under
//! one short lock, and memory stays within `capacity` entries. New entries go to the young
//! generation; when it is full it becomes the old one (the previous old one is dropped), and
//! a hit in the old generation moves the entry back to the young one.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

pub struct RecentQueries {
    capacity: usize,
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    young: HashMap<String, Arc<[f32]>>,
    old: HashMap<String, Arc<[f32]>>,
}

impl RecentQueries {
    /// Holds at most `capacity` queries (0 turns the cache off).
    pub fn new(capacity: usize) -> Self {
        Self { capacity, generations: Mutex::new(Generations::default()) }
    }

    fn generations(&self) -> std::sync::MutexGuard<'_, Generations> {
        // Maps are only ever changed by whole inserts and swaps: a poisoned lock is still sound.
        self.generations.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get(&self, query: &str) -> Option<Arc<[f32]>> {
        let mut generations = self.generations();
        if let Some(vector) = generations.young.get(query) {
            return Some(vector.clone());
        }
        let vector = generations.old.remove(query)?;
        self.insert_young(&mut generations, query.to_owned(), vector.clone());
        Some(vector)
    }

    pub fn insert(&self, query: String, vector: Arc<[f32]>) {
        if self.capacity == 0 {
            return;
        }
        let mut generations = self.generations();
        self.insert_young(&mut generations, query, vector);
    }

    fn insert_young(&self, generations: &mut Generations, query: String, vector: Arc<[f32]>) {
        // Each generation holds half, so both together stay within the capacity.
        if generations.young.len() >= self.capacity.div_ceil(2) {
            generations.old = std::mem::take(&mut generations.young);
        }
        generations.young.insert(query, vector);
    }

    pub fn len(&self) -> usize {
        let generations = self.generations();
        generations.young.len() + generations.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(value: f32) -> Arc<[f32]> {
        Arc::from(vec![value])
    }

    #[test]
    fn stays_within_capacity_and_keeps_what_is_used() {
        let cache = RecentQueries::new(4);
        for i in 0..10 {
            cache.insert(format!("q{i}"), vector(i as f32));
            assert!(cache.len() <= 4, "{} entries after {i}", cache.len());
            // q0 is asked for again and again: it must survive the churn.
            if i > 0 {
                assert_eq!(cache.get("q0").as_deref(), Some(&[0.0][..]), "after {i}");
            } else {
                cache.get("q0");
            }
        }
        assert!(cache.get("q1").is_none(), "an unused early entry was dropped");
        assert_eq!(cache.get("q9").as_deref(), Some(&[9.0][..]));
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let cache = RecentQueries::new(0);
        cache.insert("q".into(), vector(1.0));
        assert!(cache.get("q").is_none());
        assert!(cache.is_empty());
    }
}
