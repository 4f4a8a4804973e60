//! The fast router: decides whether a chat message is answered directly, by an MCP tool agent,
//! or by several domain experts, from MiniLM sentence embeddings instead of an LLM call. The
//! router service falls back to it when the routing LLM is slow, failing, or too small to
//! call tools reliably.
//!
//! A decision costs one embedding of the message (about 10 ms on CPU) and a pass over the
//! exemplar matrix (a few hundred rows: microseconds). The exemplars are compiled in
//! ([`Exemplars::builtin`]); `data/README.md` says where they come from and what they score.

mod exemplars;
mod head;
mod lexical;
mod neighbours;
mod route;
mod router;

pub use exemplars::{BUILTIN as BUILTIN_EXEMPLARS, Exemplar, ExemplarError, Exemplars};
pub use route::{Route, UnknownRoute};
pub use router::{Decision, FastRouteError, FastRouter, Nearest, Tuning};
