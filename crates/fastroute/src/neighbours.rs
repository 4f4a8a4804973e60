//! Nearest exemplars by cosine similarity: a similarity-weighted vote of the `k` closest.
//! The vote catches wordings the linear head cannot (a phrase that always means a tool, like
//! "on Google Trends"), and the closest exemplar explains a decision in logs.

use crate::route::Route;

const ROUTES: usize = Route::ALL.len();

/// The exemplar matrix, row-major, one unit-length row per exemplar.
#[derive(Debug, Clone)]
pub struct Neighbours {
    vectors: Vec<f32>,
    routes: Vec<Route>,
    dimensions: usize,
}

/// The vote of the `k` nearest and the single nearest row.
#[derive(Debug, Clone, Copy)]
pub struct Vote {
    pub shares: [f32; ROUTES],
    pub nearest: usize,
    pub nearest_similarity: f32,
}

impl Neighbours {
    pub fn new(vectors: Vec<f32>, routes: Vec<Route>, dimensions: usize) -> Self {
        Self { vectors, routes, dimensions }
    }

    /// Votes of the `k` most similar exemplars, each weighing `exp((similarity - best) /
    /// temperature)`: a neighbour much further than the best counts for little, so one very
    /// close exemplar can outvote several loose ones.
    pub fn vote(&self, query: &[f32], k: usize, temperature: f32) -> Vote {
        let mut scored: Vec<(f32, usize)> = self
            .vectors
            .chunks_exact(self.dimensions.max(1))
            .map(|row| switchyard_models::cosine(row, query))
            .enumerate()
            .map(|(index, similarity)| (similarity, index))
            .collect();
        let k = k.clamp(1, scored.len().max(1));
        if scored.len() > k {
            scored.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(k);
        }
        let (best, nearest) = scored.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0)).unwrap_or((0.0, 0));
        let mut shares = [0.0f32; ROUTES];
        for (similarity, index) in &scored {
            if let Some(route) = self.routes.get(*index) {
                shares[route.index()] += ((similarity - best) / temperature.max(1e-6)).exp();
            }
        }
        let total: f32 = shares.iter().sum();
        if total > 0.0 {
            shares = shares.map(|share| share / total);
        }
        Vote { shares, nearest, nearest_similarity: best }
    }
}
