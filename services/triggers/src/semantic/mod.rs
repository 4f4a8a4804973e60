//! The semantic signal: how close a query is in meaning to each role's exemplar questions
//! (its domains' `exemplars/*.toml`, its own description and example questions), from MiniLM
//! sentence embeddings. It speaks only when the trigger scores leave the decision open (see
//! `crate::blend`), so most queries never pay for an embedding.
//!
//! [`SemanticModel`] owns the embedder (loaded in the background; the service serves without
//! it), the exemplars' vectors and a bounded cache of recent queries' vectors;
//! [`SemanticIndex`] is one registry version's exemplars, rebuilt with the matcher.

mod index;
mod model;

pub use index::{SemanticIndex, Similarities, Similarity};
pub use model::{KeptExemplars, ModelState, SemanticModel};
pub use switchyard_models::recent::RecentQueries;
