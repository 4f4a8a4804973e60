//! Background work that shares the cores with query encoding (learning a catalog's usage
//! prior: seconds of CPU) runs at a lower scheduling priority, so a request's embedding is not
//! slowed by it on a busy machine.

/// Lowers the calling thread's scheduling priority to nice 10 (Linux, where niceness is per
/// thread). Elsewhere, or if refused, the thread keeps its priority: this is a preference,
/// never a reason to fail. Returns whether the priority was lowered.
pub fn lower_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority(2) takes plain integers and reads no memory of ours; `who` 0
        // is the calling thread on Linux.
        #[allow(unsafe_code)]
        let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
        result == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    /// The calling thread's nice value: field 19 of /proc/thread-self/stat (after the
    /// parenthesised name).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(16))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no nice value in {stat}"))
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_lowers_its_own_priority_only() {
        let (lowered, nice) = std::thread::spawn(|| (super::lower_this_thread(), own_nice())).join().expect("thread");
        assert!(lowered, "setpriority refused");
        assert_eq!(nice, 10);
        assert_ne!(own_nice(), 10, "the test's own thread is untouched");
    }
}
