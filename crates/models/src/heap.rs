//! Handing memory the process freed back to the OS. Here because this crate is the one that
//! may call the C library (the workspace forbids `unsafe` elsewhere).

/// Returns the heap's free pages to the OS (glibc's `malloc_trim(0)`); elsewhere (another C
/// library or allocator) does nothing. glibc keeps memory freed inside its heaps resident for
/// reuse, so a process that builds a large structure beside the one it replaces keeps the
/// peak of both resident long after the old one is gone. Takes the allocator's locks and
/// walks its free lists: call it after rare, large frees, off latency-sensitive threads.
/// Returns whether any memory was released.
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

#[cfg(test)]
mod tests {
    /// Freeing a large block of small allocations leaves free pages glibc can hand back.
    #[test]
    fn releases_what_was_freed() {
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 1_000]).collect();
        let kept: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 100]).collect();
        drop(blocks);
        let released = super::release_free_memory();
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(released, "20 MB freed, nothing returned");
        } else {
            assert!(!released);
        }
        assert_eq!(kept.len(), 100);
    }
}
