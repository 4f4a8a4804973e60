//! The providers against a scripted vendor server over real HTTP, in both wire formats
//! (OpenAI Chat Completions and the Anthropic Messages API), streaming and not.

#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

/// A test run once per vendor: `name::openai` and `name::anthropic`, each calling `name(vendor)`.
macro_rules! for_each_vendor {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn openai() {
                super::$name(crate::support::Vendor::OpenAi).await
            }

            #[tokio::test]
            async fn anthropic() {
                super::$name(crate::support::Vendor::Anthropic).await
            }
        }
    )*};
}

mod agents;
mod answers;
mod bursts;
mod circuit;
mod deployments;
mod failures;
mod fallback;
mod fault_logs;
mod requests;
mod shared_circuit;
mod support;
