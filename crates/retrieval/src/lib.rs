//! Tool retrieval for the MCP gateway (spec "Context Injection"): rank a gateway's tools for
//! the context a session set — BM25 over each tool's name, description and parameter names,
//! plus a usage prior learned from recorded (context, tool) pairs. `switchyard-tool-eval`
//! measures it on MetaTool-shaped files.

pub mod bm25;
pub mod prior;
pub mod text;

use bm25::{Bm25Index, Bm25Params};
use prior::UsagePrior;

/// What a tool is known by.
#[derive(Debug, Clone)]
pub struct ToolText {
    pub name: String,
    pub description: String,
    pub parameters: Vec<String>,
}

/// How much each signal weighs in the hybrid score (each signal is scaled to [0, 1] per query).
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub lexical: f32,
    pub semantic: f32,
    pub usage_prior: f32,
}

impl Default for Weights {
    fn default() -> Self {
        Self { lexical: 1.0, semantic: 1.0, usage_prior: 3.0 }
    }
}

pub struct ToolRanker {
    index: Bm25Index,
    /// Unit-length embeddings of each tool's text, when a model is available.
    tool_embeddings: Option<Vec<Vec<f32>>>,
    prior: Option<UsagePrior>,
    weights: Weights,
}

/// The text of a tool as it is embedded and indexed.
pub fn tool_document(tool: &ToolText) -> String {
    let mut text = format!("{}: {}", tool.name, tool.description);
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
        Self { index: Bm25Index::build(&documents, Bm25Params::default()), tool_embeddings: None, prior: None, weights }
    }

    /// Adds the embeddings of each tool's [`tool_document`], in tool order.
    pub fn with_tool_embeddings(mut self, embeddings: Vec<Vec<f32>>) -> Self {
        self.tool_embeddings = (embeddings.len() == self.index.len()).then_some(embeddings);
        self
    }

    /// Adds a usage prior learned from `(query, tool index)` history, with the history
    /// queries' embeddings when available (neighbours by meaning rather than shared words).
    pub fn with_history(
        mut self,
        history: &[(String, usize)],
        embeddings: Option<Vec<Vec<f32>>>,
        neighbours: usize,
    ) -> Self {
        let mut prior = UsagePrior::learn(history, self.index.len(), neighbours);
        if let Some(embeddings) = embeddings {
            prior = prior.with_embeddings(embeddings);
        }
        self.prior = Some(prior);
        self
    }

    /// Every tool's score for `query` (and its embedding, when the ranker has a model), by
    /// tool index. Each signal is scaled to [0, 1] for the query, then weighted.
    pub fn scores(&self, query: &str, query_embedding: Option<&[f32]>) -> Vec<f32> {
        let query_terms = text::terms(query);
        let mut scores = vec![0.0f32; self.index.len()];
        if self.weights.lexical > 0.0 {
            add(&mut scores, &scaled(self.index.scores(&query_terms)), self.weights.lexical);
        }
        if let (Some(tools), Some(query), true) = (&self.tool_embeddings, query_embedding, self.weights.semantic > 0.0)
        {
            let cosines: Vec<f32> =
                tools.iter().map(|t| t.iter().zip(query).map(|(a, b)| a * b).sum::<f32>()).collect();
            add(&mut scores, &min_max(cosines), self.weights.semantic);
        }
        if let (Some(prior), true) = (&self.prior, self.weights.usage_prior > 0.0) {
            add(&mut scores, &prior.prior(&query_terms, query_embedding), self.weights.usage_prior);
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

/// Scales scores to [0, 1] by the best one.
fn scaled(mut scores: Vec<f32>) -> Vec<f32> {
    let best = scores.iter().copied().fold(0.0f32, f32::max);
    if best > 0.0 {
        scores.iter_mut().for_each(|s| *s /= best);
    }
    scores
}
