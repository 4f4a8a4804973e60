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
    pub usage_prior: f32,
}

impl Default for Weights {
    fn default() -> Self {
        Self { lexical: 1.0, usage_prior: 1.0 }
    }
}

pub struct ToolRanker {
    index: Bm25Index,
    prior: Option<UsagePrior>,
    weights: Weights,
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
        Self { index: Bm25Index::build(&documents, Bm25Params::default()), prior: None, weights }
    }

    /// Adds a usage prior learned from `(query, tool index)` history.
    pub fn with_history(mut self, history: &[(String, usize)], neighbours: usize) -> Self {
        self.prior = Some(UsagePrior::learn(history, self.index.len(), neighbours));
        self
    }

    /// Every tool's score for `query`, by tool index.
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let query_terms = text::terms(query);
        let mut scores = scaled(self.index.scores(&query_terms));
        scores.iter_mut().for_each(|s| *s *= self.weights.lexical);
        if let Some(prior) = &self.prior {
            for (score, vote) in scores.iter_mut().zip(prior.prior(&query_terms)) {
                *score += self.weights.usage_prior * vote;
            }
        }
        scores
    }

    /// Tool indexes, best first.
    pub fn rank(&self, query: &str) -> Vec<usize> {
        let scores = self.scores(query);
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
        order
    }
}

/// Scales scores to [0, 1] by the best one.
fn scaled(mut scores: Vec<f32>) -> Vec<f32> {
    let best = scores.iter().copied().fold(0.0f32, f32::max);
    if best > 0.0 {
        scores.iter_mut().for_each(|s| *s /= best);
    }
    scores
}
