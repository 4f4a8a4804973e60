//! The usage prior: what past (query, tool) pairs say about a new query. The past queries most
//! like the new one vote for the tools they led to, weighted by similarity — so tools people
//! actually used for requests like this rise, whatever their descriptions say (spec: "learn
//! from actual tool usage, not just stated intent").

use crate::{
    bm25::{Bm25Index, Bm25Params},
    text::terms,
};

pub struct UsagePrior {
    index: Bm25Index,
    /// Unit-length embeddings of the past queries, when available: neighbours are then found
    /// by meaning rather than shared words.
    embeddings: Option<Vec<Vec<f32>>>,
    tool_of: Vec<usize>,
    tool_count: usize,
    neighbours: usize,
}

impl UsagePrior {
    /// Learns from `(query, tool index)` pairs; `neighbours` past queries vote for each new one.
    pub fn learn(history: &[(String, usize)], tool_count: usize, neighbours: usize) -> Self {
        let documents: Vec<Vec<String>> = history.iter().map(|(query, _)| terms(query)).collect();
        Self {
            index: Bm25Index::build(&documents, Bm25Params::default()),
            embeddings: None,
            tool_of: history.iter().map(|(_, tool)| *tool).collect(),
            tool_count,
            neighbours: neighbours.max(1),
        }
    }

    /// Finds neighbours by cosine similarity of these embeddings (one per history entry, in
    /// order) instead of by shared words.
    pub fn with_embeddings(mut self, embeddings: Vec<Vec<f32>>) -> Self {
        self.embeddings = (embeddings.len() == self.tool_of.len()).then_some(embeddings);
        self
    }

    /// A score per tool in [0, 1] (the best-voted tool gets 1; all 0 when nothing is alike).
    /// `query_embedding` is used when the prior has history embeddings.
    pub fn prior(&self, query_terms: &[String], query_embedding: Option<&[f32]>) -> Vec<f32> {
        let mut votes = vec![0.0f32; self.tool_count];
        if self.index.is_empty() {
            return votes;
        }
        let scores = match (&self.embeddings, query_embedding) {
            (Some(embeddings), Some(query)) => embeddings.iter().map(|e| dot(e, query).max(0.0)).collect(),
            _ => self.index.scores(query_terms),
        };
        let mut ranked: Vec<(usize, f32)> = scores.into_iter().enumerate().filter(|(_, s)| *s > 0.0).collect();
        let keep = self.neighbours.min(ranked.len());
        if keep == 0 {
            return votes;
        }
        if ranked.len() > keep {
            ranked.select_nth_unstable_by(keep - 1, |a, b| b.1.total_cmp(&a.1));
            ranked.truncate(keep);
        }
        for (entry, score) in ranked {
            votes[self.tool_of[entry]] += score;
        }
        let best = votes.iter().copied().fold(0.0f32, f32::max);
        if best > 0.0 {
            votes.iter_mut().for_each(|v| *v /= best);
        }
        votes
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_past_queries_vote_for_their_tool() {
        let history = vec![
            ("find flights to paris".to_owned(), 0),
            ("cheap flights next week".to_owned(), 0),
            ("what's the weather in paris".to_owned(), 1),
        ];
        let prior = UsagePrior::learn(&history, 3, 5);
        let votes = prior.prior(&terms("any flights to rome?"), None);
        assert_eq!(votes[0], 1.0);
        assert_eq!(votes[2], 0.0, "a tool nobody used gets no vote");
        assert!(votes[1] < votes[0]);
    }
}
