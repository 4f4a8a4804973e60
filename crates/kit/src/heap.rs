//! Handing memory the process freed back to the OS. The one module of the kit that may call the
//! C library (`unsafe`), and only glibc's allocator entry points.
//!
//! glibc keeps memory freed inside its heaps resident for reuse. A burst (calls held on retries
//! while a store restarts, a catalog built beside the one it replaces) leaves its peak resident
//! long after it is over: in the soak the edge stayed 2.5 MiB (11 %) above its warm-up level for
//! the rest of the run after one Redis restart, 0.3 MiB with the trim. [`spawn_trimmer`] checks
//! the free memory glibc holds on a schedule and trims it when there is enough to matter.

use std::time::Duration;

/// The bytes free inside glibc's arenas, kept for reuse (`fordblks` of its `mallinfo2`); `None`
/// with another C library or allocator. Pages already returned by an earlier trim are counted
/// until they are reused: this is what a trim may release, not what is resident. Walks every
/// arena's free lists under its lock: for a check now and then, not for every request.
pub fn free_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2(3) takes nothing and returns a plain struct by value; it reads only
        // glibc's own arenas, under their locks.
        #[allow(unsafe_code)]
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Returns the heap's free pages to the OS (glibc's `malloc_trim(0)`); elsewhere (another C
/// library or allocator) does nothing. Takes the allocator's locks and walks its free lists:
/// call it after rare, large frees, off latency-sensitive threads. Returns whether any memory
/// was released.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim(3) takes a plain integer (the padding to keep) and works on
        // glibc's own arenas under their locks; it reads no memory of ours.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Free memory below this is left alone: trimming it would cost page faults when it is reused
/// for less than it returns.
pub const TRIM_AT_FREE_BYTES: usize = 1 << 20;

/// When to trim: when at least [`TRIM_AT_FREE_BYTES`] more are free than the least seen since
/// the last trim. Pages a trim returned stay counted as free until they are reused, so free
/// memory as such says little; memory freed on top of it is what a trim can hand back.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrimPolicy {
    /// The least free memory seen since the last trim (right after it, at first).
    floor: usize,
}

impl TrimPolicy {
    /// Whether a check that found `free` bytes free should trim; a check that should not lowers
    /// the floor when memory was reused meanwhile.
    pub fn should_trim(&mut self, free: usize) -> bool {
        if free >= self.floor.saturating_add(TRIM_AT_FREE_BYTES) {
            return true;
        }
        self.floor = self.floor.min(free);
        false
    }

    /// Records what a trim left free.
    pub fn trimmed(&mut self, free: usize) {
        self.floor = free;
    }
}

/// Checks the heap every `every` and trims it when [`TrimPolicy`] says so, on a blocking
/// thread (the trim holds the allocator's locks for a moment; never on an async worker).
/// `Duration::ZERO`, or an allocator that is not glibc's, disables it (returns `None`). Call
/// from within a tokio runtime, once per process; the task ends with the runtime.
pub fn spawn_trimmer(every: Duration) -> Option<tokio::task::JoinHandle<()>> {
    if every.is_zero() || free_bytes().is_none() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is immediate: let start-up's allocations settle
        let mut policy = TrimPolicy::default();
        loop {
            ticks.tick().await;
            let checked = tokio::task::spawn_blocking(move || {
                let free = free_bytes()?;
                if policy.should_trim(free) {
                    let released = release_free_memory();
                    let after = free_bytes()?;
                    policy.trimmed(after);
                    if released {
                        tracing::debug!(free_before = free, free_after = after, "returned freed heap to the OS");
                    }
                }
                Some(policy)
            })
            .await;
            // A check that failed (none is expected) keeps the last policy and tries again.
            if let Ok(Some(checked)) = checked {
                policy = checked;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GNU: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

    /// Freeing a large block of small allocations leaves free pages glibc can hand back.
    #[test]
    fn releases_what_was_freed() {
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 1_000]).collect();
        let kept: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 100]).collect();
        let before = free_bytes();
        drop(blocks);
        let after = free_bytes();
        if GNU {
            let (before, after) = (before.expect("glibc reports usage"), after.expect("glibc reports usage"));
            assert!(after >= before + 15_000_000, "20 MB freed, free went {before} -> {after}");
            assert!(TrimPolicy::default().should_trim(after));
        }
        let released = release_free_memory();
        assert_eq!(released, GNU, "20 MB freed; released: {released}");
        assert_eq!(kept.len(), 100);
    }

    #[test]
    fn only_memory_freed_since_the_least_seen_is_worth_a_trim() {
        let mut fresh = TrimPolicy::default();
        assert!(!fresh.should_trim(TRIM_AT_FREE_BYTES - 1));
        let mut fresh = TrimPolicy::default();
        assert!(fresh.should_trim(TRIM_AT_FREE_BYTES));

        // 5 MiB stayed counted as free (already returned) after a trim: half a MiB more is not
        // worth another, a whole one is.
        let mut policy = TrimPolicy::default();
        policy.trimmed(5 << 20);
        assert!(!policy.should_trim((5 << 20) + (1 << 19)));
        assert!(policy.should_trim(6 << 20));

        // Reuse brought the free memory down to 1 MiB; a burst freeing 1 MiB on top is worth a
        // trim although less is free than right after the last one.
        let mut policy = TrimPolicy::default();
        policy.trimmed(5 << 20);
        assert!(!policy.should_trim(1 << 20));
        assert!(policy.should_trim(2 << 20));
    }
}
