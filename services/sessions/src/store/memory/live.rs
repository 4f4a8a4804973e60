//! placeholder
pub struct MemoryLiveStore;
