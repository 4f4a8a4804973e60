//! Tool retrieval for the MCP gateway (docs/requirements.md#mcp-filtered-list): rank a
//! gateway's tools for the context a session set — BM25 over each tool's name, description
//! and parameter names, plus a usage prior learned from recorded (context, tool) pairs, with
//! query adapters ([`adapter`]) sharpening the embedding signal. `switchyard-tool-eval`
//! measures it on MetaTool-shaped files.

pub mod adapter;
pub mod bm25;
pub mod prior;
pub mod quantized;
pub mod text;
pub mod words;

pub use adapter::{AdapterError, AdapterParams, QueryAdapter};
use std::sync::Arc;

use bm25::{Bm25Index, Bm25Params};
use prior::UsagePrior;
pub use prior::{NEIGHBOURS, PriorParams, Votes};
pub use quantized::{EmbeddingRows, QuantizedRows, SharedRows};
use switchyard_models::cosine;
pub use words::{WordClassifier, WordParams};

/// What a tool is known by.
#[derive(Debug, Clone)]
pub struct ToolText {
    pub name: String,
    pub description: String,
    pub parameters: Vec<String>,
}

/// How much each signal weighs in the hybrid score (each signal is scaled to [0, 1] per query).
/// Use [`Weights::default`] (or [`Weights::cold_start`] / [`Weights::with_history`]) with
/// [`NEIGHBOURS`] neighbours for the prior.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub lexical: f32,
    pub semantic: f32,
    pub usage_prior: f32,
}

/// Measured on the MetaTool dev split (BENCHMARKS.md, "Tool retrieval"; the rounds in
/// docs/experiments/tool-retrieval.md).
impl Weights {
    /// No usage history: meaning must outweigh shared words (semantic 3× BM25: recall@5 0.788,
    /// against 0.736 at 1×; 4× once the base query adapter sharpens the semantic signal).
    pub fn cold_start() -> Self {
        Self { lexical: 1.0, semantic: 4.0, usage_prior: 0.0 }
    }

    /// With a usage prior (see [`PriorParams`]): what people used for similar requests
    /// outweighs what descriptions say, yet meaning keeps 3× the weight of BM25, so that tools
    /// with little or no history still compete (recall@5 on tools absent from the history:
    /// 0.825 at semantic 1 and prior 12, 0.865 at 3 and 16, for 0.961 against 0.960 on
    /// requests like past ones).
    pub fn with_history() -> Self {
        Self { lexical: 1.0, semantic: 3.0, usage_prior: 16.0 }
    }
}

/// [`Weights::with_history`]: with no prior its weight is unused, which leaves meaning at 3×
/// BM25, close to [`Weights::cold_start`].
impl Default for Weights {
    fn default() -> Self {
        Self::with_history()
    }
}

/// How the lexical and semantic signals are put on one scale before they are weighted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// BM25 divided by the query's best score; cosines scaled between the worst and the best.
    MinMax,
    /// Each signal in standard deviations from its mean over the tools, so a tool that stands
    /// out counts more than one that merely tops a flat field.
    ZScore,
    /// Reciprocal rank fusion: `1 / (60 + rank)` per signal, scaled so rank 1 scores 1.
    Rrf,
}

pub struct ToolRanker {
    index: Bm25Index,
    /// Unit-length embeddings of each tool's text, when a model is available.
    tool_embeddings: Option<Vec<Vec<f32>>>,
    prior: Option<UsagePrior>,
    /// Learned with the prior when [`PriorParams::adapter_weight`] is on (shared with the
    /// prior, which finds neighbours through it).
    adapter: Option<Arc<QueryAdapter>>,
    /// Maps queries before the semantic signal's cosine ([`ToolRanker::with_base_adapter`]).
    base_adapter: Option<Arc<QueryAdapter>>,
    /// See [`PriorParams::unseen_share`].
    unseen_share: f32,
    /// See [`PriorParams::adapted_neighbours`].
    adapted_neighbours: bool,
    /// See [`PriorParams::cold_fallback`].
    cold_fallback: bool,
    weights: Weights,
    fusion: Fusion,
}

/// What each signal contributed to every tool's score (weighted; the score is the sum).
#[derive(Debug, Clone, Default)]
pub struct Signals {
    pub lexical: Option<Vec<f32>>,
    pub semantic: Option<Vec<f32>>,
    pub usage_prior: Option<Vec<f32>>,
}

fn weighted(mut values: Vec<f32>, weight: f32) -> Vec<f32> {
    values.iter_mut().for_each(|v| *v *= weight);
    values
}

/// The text of a tool as it is embedded and indexed: the name as words ("ResearchHelper" →
/// "Research Helper", which the model's tokenizer reads better: embedding recall@5 0.749 →
/// 0.759), then the description and parameter names.
pub fn tool_document(tool: &ToolText) -> String {
    let mut text = format!("{}: {}", text::name_words(&tool.name), tool.description);
    if !tool.parameters.is_empty() {
        text.push_str(" Parameters: ");
        text.push_str(&tool.parameters.join(", "));
    }
    text
}

impl ToolRanker {
    /// Indexes tools; the name's words count twice (a tool's name is its strongest label).
    pub fn new(tools: &[ToolText], weights: Weights) -> Self {
        let documents: Vec<Vec<String>> = tools
            .iter()
            .map(|tool| {
                let mut terms = text::terms(&tool.name);
                terms.extend(text::terms(&tool.name));
                terms.extend(text::terms(&tool.description));
                for parameter in &tool.parameters {
                    terms.extend(text::terms(parameter));
                }
                terms
            })
            .collect();
        Self {
            index: Bm25Index::build(&documents, Bm25Params::default()),
            tool_embeddings: None,
            prior: None,
            adapter: None,
            base_adapter: None,
            unseen_share: 0.0,
            adapted_neighbours: false,
            cold_fallback: false,
            weights,
            fusion: Fusion::MinMax,
        }
    }

    /// Puts the signals on one scale with `fusion` instead of [`Fusion::MinMax`].
    pub fn with_fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = fusion;
        self
    }

    /// Adds the embeddings of each tool's [`tool_document`], in tool order.
    pub fn with_tool_embeddings(mut self, embeddings: Vec<Vec<f32>>) -> Self {
        self.tool_embeddings = (embeddings.len() == self.index.len()).then_some(embeddings);
        self
    }

    /// Maps each query with `adapter` before its cosine with the tools (the semantic signal):
    /// an adapter learned beforehand from other tools' requests, so it helps before this
    /// ranker has any history of its own. Ignored if its dimensions are not the embeddings'.
    /// Shared, since one adapter serves every catalog a gateway builds.
    pub fn with_base_adapter(mut self, adapter: Arc<QueryAdapter>) -> Self {
        self.base_adapter = Some(adapter);
        self
    }

    /// Adds a usage prior learned from `(query, tool index)` history, with the history
    /// queries' embeddings when available (neighbours by meaning rather than shared words).
    pub fn with_history(
        self,
        history: &[(impl AsRef<str>, usize)],
        embeddings: Option<SharedRows>,
        neighbours: usize,
    ) -> Self {
        self.with_history_params(history, embeddings, PriorParams { neighbours, ..PriorParams::default() })
    }

    /// [`with_history`](Self::with_history) with every parameter of the prior. The
    /// embeddings are read where they are kept ([`SharedRows`]): neither the adapter's
    /// training nor the prior copies them, or holds more than a minibatch of them as f32.
    pub fn with_history_params(
        mut self,
        history: &[(impl AsRef<str>, usize)],
        embeddings: Option<SharedRows>,
        params: PriorParams,
    ) -> Self {
        let mut prior = UsagePrior::learn_with(history, self.index.len(), params);
        self.adapter = None;
        if let Some(embeddings) = embeddings {
            if let (true, Some(tools)) = (params.adapter_weight > 0.0, &self.tool_embeddings) {
                let used: Vec<usize> = history.iter().map(|(_, tool)| *tool).collect();
                // Too little history is the usual reason for none; the prior works without.
                self.adapter = QueryAdapter::learn(&embeddings, &used, tools, params.adapter).ok().map(Arc::new);
            }
            let mapped_by = self.adapter.clone().filter(|_| params.adapted_neighbours);
            prior = prior.with_shared_rows(embeddings, mapped_by);
        }
        self.unseen_share = params.unseen_share;
        self.adapted_neighbours = params.adapted_neighbours;
        self.cold_fallback = params.cold_fallback;
        self.prior = Some(prior);
        self
    }

    /// The query adapter learned with the usage prior, if any.
    pub fn adapter(&self) -> Option<&QueryAdapter> {
        self.adapter.as_deref()
    }

    /// Bytes the usage prior holds on the heap for its history (0 without one).
    pub fn history_heap_bytes(&self) -> usize {
        self.prior.as_ref().map_or(0, UsagePrior::heap_bytes)
    }

    /// The usage prior's word classifier, if one was learned.
    pub fn words(&self) -> Option<&WordClassifier> {
        self.prior.as_ref().and_then(UsagePrior::words)
    }

    /// Each signal for `query` by tool index, scaled to [0, 1] for the query and already
    /// weighted (so the score is their sum); a signal the ranker lacks is `None`.
    pub fn signals(&self, query: &str, query_embedding: Option<&[f32]>) -> Signals {
        let query_terms = text::terms(query);
        let lexical = (self.weights.lexical > 0.0).then(|| {
            let bm25 = self.index.scores(&query_terms);
            let bm25 = match self.fusion {
                Fusion::MinMax => scaled(bm25),
                Fusion::ZScore => z_scores(bm25),
                Fusion::Rrf => reciprocal_ranks(&bm25),
            };
            weighted(bm25, self.weights.lexical)
        });
        let semantic = match (&self.tool_embeddings, query_embedding, self.weights.semantic > 0.0) {
            (Some(tools), Some(query), true) => {
                let based = self.base_adapter.as_ref().and_then(|adapter| adapter.apply(query));
                let query = based.as_deref().unwrap_or(query);
                let cosines: Vec<f32> = tools.iter().map(|tool| cosine(tool, query)).collect();
                let cosines = match self.fusion {
                    Fusion::MinMax => min_max(cosines),
                    Fusion::ZScore => z_scores(cosines),
                    Fusion::Rrf => reciprocal_ranks(&cosines),
                };
                Some(weighted(cosines, self.weights.semantic))
            }
            _ => None,
        };
        let usage_prior = match (&self.prior, self.weights.usage_prior > 0.0) {
            (Some(prior), true) => {
                let adapted_query = match (&self.adapter, query_embedding) {
                    (Some(adapter), Some(query)) => adapter.apply(query),
                    _ => None,
                };
                let adapted = match (&adapted_query, &self.tool_embeddings) {
                    (Some(adapted), Some(tools)) => {
                        Some(tools.iter().map(|tool| cosine(tool, adapted)).collect::<Vec<f32>>())
                    }
                    _ => None,
                };
                let neighbour_query = match (self.adapted_neighbours, &adapted_query) {
                    (true, Some(adapted)) => Some(adapted.as_slice()),
                    _ => query_embedding,
                };
                let (mut votes, confidence) =
                    prior.prior_and_confidence(&query_terms, neighbour_query, adapted.as_deref());
                if self.unseen_share > 0.0 {
                    let fallback = if self.cold_fallback { 1.0 - confidence } else { 0.0 };
                    self.stand_in_for_unseen(prior, &mut votes, fallback, &lexical, &semantic);
                }
                Some(weighted(votes, self.weights.usage_prior))
            }
            _ => None,
        };
        Signals { lexical, semantic, usage_prior }
    }

    /// Gives each tool nobody has used yet a share of its cold-start score (lexical +
    /// semantic, scaled so the query's best tool has 1) in place of the votes it cannot have.
    /// Used tools get `fallback` × the same stand-in on top of their votes
    /// ([`PriorParams::cold_fallback`]).
    fn stand_in_for_unseen(
        &self,
        prior: &UsagePrior,
        votes: &mut [f32],
        fallback: f32,
        lexical: &Option<Vec<f32>>,
        semantic: &Option<Vec<f32>>,
    ) {
        let mut cold = vec![0.0f32; votes.len()];
        for signal in [lexical, semantic].into_iter().flatten() {
            add(&mut cold, signal, 1.0);
        }
        let cold = min_max(cold);
        for (tool, vote) in votes.iter_mut().enumerate() {
            if prior.uses(tool) == 0 {
                *vote = self.unseen_share * cold[tool];
            } else {
                *vote += fallback * self.unseen_share * cold[tool];
            }
        }
    }

    /// Every tool's score for `query` (and its embedding, when the ranker has a model), by
    /// tool index: the sum of its [`Signals`].
    pub fn scores(&self, query: &str, query_embedding: Option<&[f32]>) -> Vec<f32> {
        let signals = self.signals(query, query_embedding);
        let mut scores = vec![0.0f32; self.index.len()];
        for signal in [&signals.lexical, &signals.semantic, &signals.usage_prior].into_iter().flatten() {
            add(&mut scores, signal, 1.0);
        }
        scores
    }

    /// Tool indexes, best first.
    pub fn rank(&self, query: &str, query_embedding: Option<&[f32]>) -> Vec<usize> {
        let scores = self.scores(query, query_embedding);
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
        order
    }
}

fn add(total: &mut [f32], signal: &[f32], weight: f32) {
    for (t, s) in total.iter_mut().zip(signal) {
        *t += weight * s;
    }
}

/// Scales similarities to [0, 1] between the worst and the best (cosines are never 0-based).
fn min_max(mut values: Vec<f32>) -> Vec<f32> {
    let (low, high) = values.iter().fold((f32::MAX, f32::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
    if high > low {
        values.iter_mut().for_each(|v| *v = (*v - low) / (high - low));
    }
    values
}

/// Standard deviations from the mean (all 0 when every value is the same).
fn z_scores(mut values: Vec<f32>) -> Vec<f32> {
    let n = values.len().max(1) as f32;
    let mean = values.iter().sum::<f32>() / n;
    let deviation = (values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n).sqrt();
    let scale = if deviation > 0.0 { 1.0 / deviation } else { 0.0 };
    values.iter_mut().for_each(|v| *v = (*v - mean) * scale);
    values
}

/// Reciprocal rank fusion's term, `60 / (60 + rank)` (rank 1 is the best), 0 for a score of
/// 0 (a tool sharing no word with the query is not ranked by BM25 at all).
fn reciprocal_ranks(values: &[f32]) -> Vec<f32> {
    const K: f32 = 60.0;
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*b].total_cmp(&values[*a]));
    let mut out = vec![0.0; values.len()];
    for (rank, index) in order.into_iter().enumerate() {
        if values[index] != 0.0 {
            out[index] = K / (K + rank as f32 + 1.0);
        }
    }
    out
}

/// Scales scores to [0, 1] by the best one.
fn scaled(mut scores: Vec<f32>) -> Vec<f32> {
    let best = scores.iter().copied().fold(0.0f32, f32::max);
    if best > 0.0 {
        scores.iter_mut().for_each(|s| *s /= best);
    }
    scores
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> ToolText {
        ToolText { name: name.to_owned(), description: description.to_owned(), parameters: Vec::new() }
    }

    /// A tool added after the history was recorded has no votes; without its stand-in the
    /// used tool, whose past request merely shares a word, would outrank it.
    #[test]
    fn a_never_used_tool_that_fits_competes_with_used_ones() {
        let tools = [tool("FlightFinder", "book airline flights"), tool("TrainTimes", "train timetables and tickets")];
        let history = vec![("cheap tickets to rome".to_owned(), 0)];
        let query = "train tickets to milan";
        let rank = |unseen_share| {
            ToolRanker::new(&tools, Weights::with_history())
                .with_history_params(&history, None, PriorParams { unseen_share, ..PriorParams::default() })
                .rank(query, None)
        };
        assert_eq!(rank(0.0), [0, 1], "votes alone bury the new tool");
        assert_eq!(rank(1.0), [1, 0], "its stand-in is its cold-start standing: the best, so 1 × 16");
        let ranker = ToolRanker::new(&tools, Weights::with_history()).with_history_params(
            &history,
            None,
            PriorParams::default(),
        );
        let signals = ranker.signals(query, None);
        assert_eq!(signals.usage_prior.as_deref(), Some(&[16.0, 16.0][..]), "both the best of their kind");
    }
}
