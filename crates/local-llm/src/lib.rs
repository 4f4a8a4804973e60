//! A local chat model behind [`switchyard_llm::Provider`]: provider `local`, model
//! `smollm2-135m-instruct` (so `local/smollm2-135m-instruct`), SmolLM2-135M-Instruct from a
//! GGUF file (Q4_1 weights, Q8_0 tied embedding), on the CPU, in safe Rust.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use switchyard_llm::{ChatRequest, Message, Provider};
//! use switchyard_local_llm::{LocalModel, LocalProvider, MODEL_NAME, default_model_dir};
//!
//! let dir = default_model_dir();
//! let model = tokio::task::spawn_blocking(move || LocalModel::load(dir)).await??;
//! let provider = LocalProvider::new(model);
//! let request = ChatRequest { model: MODEL_NAME.into(), messages: vec![Message::user("Hi!")], ..Default::default() };
//! let answer = provider.complete(request).await?;
//! # Ok(()) }
//! ```
//!
//! # Files
//! `scripts/fetch-models.sh` puts the model at `models/smollm2-135m-instruct/model.gguf`
//! (the folder `$SWITCHYARD_MODELS_DIR` overrides `models/`, see [`default_model_dir`]).
//! The file carries the tokenizer too; [`tokenizer`] explains why it is built here rather
//! than by candle. Loading takes well under a second.
//!
//! # Where the time goes, and what was changed
//! candle's `quantized_llama` on this file decodes at roughly 20 tokens/s and needs about
//! 1.5 s for a 30-token prompt on two cores; this crate, about 115 tokens/s and 130 ms. Profiling showed two causes: candle has
//! no vectorized kernel for Q4_1 (its `vec_dot` for that format is the scalar reference
//! loop), and a decoding step is hundreds of tiny tensor operations, each allocating and
//! dispatching. This crate therefore runs its own forward pass ([`forward`]) over its own
//! kernels ([`quant`]):
//!
//! - weights stay in the file's Q4_1 (no rounding to another format, and 40% fewer bytes
//!   per token than Q8_0); activations are quantized to 8 bits per 32 values and each block
//!   is a few AVX2 instructions (`maddubs`), selected at run time through `pulp` so the code
//!   stays safe and still runs (scalar) on CPUs without AVX2;
//! - the kernels keep independent accumulators (one FMA chain's latency otherwise bounds a
//!   matrix-vector product) and take up to four prompt tokens per pass over a weight row,
//!   so a prompt reads each weight once per four tokens;
//! - Q, K and V, and gate and up, are single stacked matrices; all buffers are reused;
//!   the key/value cache grows in place.
//!
//! Measured figures and the memory-bandwidth bound are in `BENCHMARKS.md` ("Local model");
//! `cargo bench -p switchyard-local-llm --bench generate` reproduces them.
//!
//! # Concurrency
//! Each generation runs on a blocking thread, at most one per core ([`LocalOptions`]);
//! further requests wait for a permit. How many threads a generation computes on was decided
//! by measurement on two cores (`BENCHMARKS.md`): two threads make one stream faster (about
//! 114 against 90 tokens/s, prefill 115 against 179 ms) but two concurrent streams slower
//! (137 against 177 tokens/s together), because decoding is bound by memory bandwidth and
//! per-step synchronisation. So by default a generation uses a pool of all cores while it
//! runs alone and its own thread while others run, checked before every forward step
//! ([`Session::adaptive`]); `threads_per_generation: Some(n)` fixes it instead. The results
//! are the same either way (each dot product is computed identically).
//!
//! # Tool calls
//! With tools and `tool_choice` `auto` or `required`, the model calls one of them unless a
//! tool result already follows the last user message (then it answers in text, using the
//! result). The call is built by constrained decoding ([`tools`]): the tool chosen by
//! likelihood among the candidates, each required argument generated within its JSON type,
//! and the result checked against the schema. When no valid call can be made, the answer is
//! a text completion starting with [`NO_TOOL_CALL_PREFIX`], with `finish_reason`
//! [`FinishReason::Other`](switchyard_llm::FinishReason::Other) and no tool calls;
//! [`is_no_tool_call`] tests for it. It never invents a tool result.
//!
//! What it cannot serve is refused before any generation, with
//! [`ErrorKind::Unsupported`](switchyard_llm::ErrorKind::Unsupported) naming the field: images
//! (it reads text only), a JSON `response_format`, a tool call it is required to make
//! (`tool_choice` `required` or a named tool) when no such tool's required arguments are of
//! types it can fill (strings, numbers, booleans, enums), and a named tool that is not listed.
//! A named tool is the only candidate.

pub mod chat;
pub mod forward;
pub mod generate;
mod model;
mod provider;
pub mod quant;
pub mod tokenizer;
pub mod tools;
mod weights;

use std::path::PathBuf;

pub use forward::{Logits, Session};
pub use model::{LoadError, LocalModel, MODEL_FILE};
pub use provider::{LocalOptions, LocalProvider};
pub use weights::Config;

/// The provider's name (`local/…`).
pub const PROVIDER_NAME: &str = "local";
/// The one model the provider answers for.
pub const MODEL_NAME: &str = "smollm2-135m-instruct";
/// The model's folder under the models directory.
pub const MODEL_DIR_NAME: &str = "smollm2-135m-instruct";
/// How the text answer starts when the model could not make a valid tool call.
pub const NO_TOOL_CALL_PREFIX: &str = "The local model could not make a valid tool call";

/// The model folder: `$SWITCHYARD_MODELS_DIR/smollm2-135m-instruct` when that is set (the
/// variable `scripts/fetch-models.sh` honours), else `models/smollm2-135m-instruct` under
/// the current directory when it exists (a service started from the repository, or an
/// image with the folder beside it), else the one of the workspace this crate was built in.
pub fn default_model_dir() -> PathBuf {
    if let Some(models) = std::env::var_os("SWITCHYARD_MODELS_DIR") {
        return PathBuf::from(models).join(MODEL_DIR_NAME);
    }
    let relative = PathBuf::from("models").join(MODEL_DIR_NAME);
    if relative.is_dir() {
        return relative;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models").join(MODEL_DIR_NAME)
}

/// The answer says the model could not make a valid tool call (rather than answering).
pub fn is_no_tool_call(completion: &switchyard_llm::Completion) -> bool {
    completion.tool_calls.is_empty()
        && completion.finish_reason == switchyard_llm::FinishReason::Other
        && completion.content.starts_with(NO_TOOL_CALL_PREFIX)
}
