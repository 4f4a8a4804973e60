//! placeholder
pub struct MemoryRecordStore;
pub struct MemoryRoleStore;
