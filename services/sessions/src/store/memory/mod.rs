//! In-memory stores for `switchyard dev` and tests: nothing survives the process.

mod live;
mod record;

pub use live::MemoryLiveStore;
pub use record::{MemoryRecordStore, MemoryRoleStore};
