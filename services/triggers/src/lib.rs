//! Trigger detection (spec "Context Switching": TriggerService).
pub mod domain;
pub mod error;
pub mod matcher;
pub mod packs;
pub mod store;
