//! LLM providers behind one trait (design: "Models and providers"). A [`Provider`] turns one
//! [`ChatRequest`] into a stream of [`StreamEvent`]s: text deltas as they arrive, tool calls
//! assembled from however many chunks the vendor splits their arguments into, then one
//! [`Completion`]. Models are named with their provider (`openai/gpt-4o-mini`,
//! `anthropic/claude-3-5-sonnet-20241022`); [`Providers`] resolves such a name, and
//! [`Providers::stream_with_fallback`] walks an ordered list of models when one fails.
//!
//! What is hand-written, and why: the HTTP calls use `reqwest` (rustls, one client per
//! provider), but the vendors' wire types, the SSE framing and the retry loop are ours. For
//! OpenAI we looked at `async-openai` (0.43, its types-only feature): its response types
//! require fields and enum values that OpenAI-compatible servers (vLLM, Ollama, LiteLLM) omit
//! or vary (`created`, `object`, unknown `finish_reason`s, tool-call arguments sent as an
//! object), so a vendor's small deviation would become a failed call, and the request side
//! would need as much conversion code as writing the few structs we send. No maintained
//! Anthropic crate fits, so its types are ours too. The SSE parser is about a hundred lines,
//! unit-tested against events split at every byte; it saves a parser-combinator dependency
//! and lets the stream reader own the idle timeout. Retries need to see the status,
//! `Retry-After` and the vendor's error body before deciding, and must stop once a stream has
//! yielded text, which no client's built-in retry offers.

mod anthropic;
mod args;
pub mod circuit;
pub mod circuit_sync;
mod config;
pub mod deployments;
pub mod error;
mod fallback;
#[cfg(test)]
mod fuzz;
pub mod model;
mod openai;
pub mod provider;
mod sse;
mod streaming;
pub mod telemetry;
mod transport;
pub mod types;
mod vendor;

pub use anthropic::Anthropic;
pub use args::ProviderArgs;
pub use circuit::{CircuitBreaker, CircuitSettings, CircuitState};
pub use circuit_sync::CircuitSync;
pub use config::ProviderConfig;
pub use deployments::{DeploymentSettings, Deployments};
pub use error::{ErrorKind, ProviderError};
pub use fallback::{AllModelsFailed, Answered, ModelFailure};
pub use model::ModelRef;
pub use openai::OpenAi;
pub use provider::{EventStream, Provider, Providers};
pub use types::{
    AnthropicHeaders, ChatRequest, Completion, ContentPart, FinishReason, Image, ImageSource, Message, ResponseFormat,
    StreamEvent, ToolCall, ToolChoice, ToolSpec, Usage,
};
