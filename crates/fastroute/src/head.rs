//! A softmax-regression head over sentence embeddings and word features, trained from the
//! exemplars when the router is built. Why a head as well as nearest neighbours: neighbours
//! copy the label of the closest wording, so a message phrased unlike any exemplar takes
//! whichever route happens to sit nearest; a linear head learns the directions (and words)
//! that separate the routes across all exemplars, and generalises to new phrasing.
//!
//! Training is full-batch gradient descent with Nesterov momentum from zero weights: the loss
//! is convex, the data order does not matter, and the result is the same on every run.

use crate::lexical;
use crate::route::Route;

const ROUTES: usize = Route::ALL.len();

/// Training settings (see [`crate::Tuning`]).
#[derive(Debug, Clone, Copy)]
pub struct Training {
    /// L2 penalty on the weights (not the biases): keeps the head from memorising exemplars.
    pub l2: f32,
    pub steps: usize,
    pub learning_rate: f32,
}

/// Weights `[route][dimension]` for the embedding, `[route][bucket]` for the word features,
/// and a bias per route.
#[derive(Debug, Clone)]
pub struct Head {
    weights: Vec<f32>,
    words: Vec<f32>,
    biases: [f32; ROUTES],
    dimensions: usize,
}

/// One training row: a unit-length embedding and its sparse word features.
pub struct Row<'a> {
    pub vector: &'a [f32],
    pub words: &'a [(u32, f32)],
    pub route: Route,
}

impl Head {
    /// Trains on `rows`. Each route's exemplars weigh the same in total, so a route with fewer
    /// exemplars (multiagent) is not drowned out by the larger ones.
    pub fn train(rows: &[Row<'_>], dimensions: usize, training: Training) -> Self {
        let mut counts = [0usize; ROUTES];
        for row in rows {
            counts[row.route.index()] += 1;
        }
        let present = counts.iter().filter(|&&count| count > 0).count().max(1);
        let row_weight: Vec<f32> =
            rows.iter().map(|row| 1.0 / (present as f32 * counts[row.route.index()].max(1) as f32)).collect();

        let dense = ROUTES * dimensions;
        let sparse = ROUTES * lexical::BUCKETS;
        let total = dense + sparse + ROUTES;
        let mut params = vec![0.0f32; total];
        let mut velocity = vec![0.0f32; total];
        let mut ahead = vec![0.0f32; total];
        let mut gradient = vec![0.0f32; total];
        const MOMENTUM: f32 = 0.9;
        for _ in 0..training.steps {
            for ((next, param), speed) in ahead.iter_mut().zip(&params).zip(&velocity) {
                *next = param + MOMENTUM * speed;
            }
            gradient.fill(0.0);
            let (weights, rest) = ahead.split_at(dense);
            let (words, biases) = rest.split_at(sparse);
            for (row, weight) in rows.iter().zip(&row_weight) {
                let probs = softmax(logits(weights, words, biases, row.vector, row.words, dimensions));
                for route in 0..ROUTES {
                    let target = if row.route.index() == route { 1.0 } else { 0.0 };
                    let error = weight * (probs[route] - target);
                    let dense_row = &mut gradient[route * dimensions..(route + 1) * dimensions];
                    for (g, value) in dense_row.iter_mut().zip(row.vector) {
                        *g += error * value;
                    }
                    for (bucket, value) in row.words {
                        if let Some(g) = gradient.get_mut(dense + route * lexical::BUCKETS + *bucket as usize) {
                            *g += error * value;
                        }
                    }
                    gradient[dense + sparse + route] += error;
                }
            }
            for (g, w) in gradient[..dense + sparse].iter_mut().zip(&ahead[..dense + sparse]) {
                *g += training.l2 * w;
            }
            for ((param, speed), g) in params.iter_mut().zip(velocity.iter_mut()).zip(&gradient) {
                *speed = MOMENTUM * *speed - training.learning_rate * g;
                *param += *speed;
            }
        }
        let mut biases = [0.0; ROUTES];
        biases.copy_from_slice(&params[dense + sparse..]);
        let words = params[dense..dense + sparse].to_vec();
        params.truncate(dense);
        Self { weights: params, words, biases, dimensions }
    }

    /// Route probabilities for one unit-length embedding and its word features.
    pub fn probabilities(&self, vector: &[f32], words: &[(u32, f32)]) -> [f32; ROUTES] {
        softmax(logits(&self.weights, &self.words, &self.biases, vector, words, self.dimensions))
    }
}

fn logits(
    weights: &[f32],
    words: &[f32],
    biases: &[f32],
    x: &[f32],
    features: &[(u32, f32)],
    dimensions: usize,
) -> [f32; ROUTES] {
    let mut out = [0.0; ROUTES];
    for (route, logit) in out.iter_mut().enumerate() {
        let row = weights.get(route * dimensions..(route + 1) * dimensions).unwrap_or(&[]);
        let lexical: f32 = features
            .iter()
            .filter_map(|(bucket, value)| words.get(route * lexical::BUCKETS + *bucket as usize).map(|w| w * value))
            .sum();
        *logit = switchyard_models::cosine(row, x) + lexical + biases.get(route).copied().unwrap_or(0.0);
    }
    out
}

pub(crate) fn softmax(logits: [f32; ROUTES]) -> [f32; ROUTES] {
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps = logits.map(|logit| (logit - top).exp());
    let total: f32 = exps.iter().sum();
    exps.map(|value| value / total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separates_separable_routes() {
        // Three orthogonal directions, two exemplars each, slightly tilted.
        let vectors =
            [[1.0, 0.1, 0.0], [1.0, 0.0, 0.1], [0.1, 1.0, 0.0], [0.0, 1.0, 0.1], [0.1, 0.0, 1.0], [0.0, 0.1, 1.0]];
        let routes =
            [Route::Direct, Route::Direct, Route::McpAgent, Route::McpAgent, Route::Multiagent, Route::Multiagent];
        let rows: Vec<Row<'_>> =
            vectors.iter().zip(routes).map(|(vector, route)| Row { vector, words: &[], route }).collect();
        let head = Head::train(&rows, 3, Training { l2: 1e-3, steps: 200, learning_rate: 1.0 });
        for (vector, route) in vectors.iter().zip(routes) {
            let probs = head.probabilities(vector, &[]);
            let best = (0..3).max_by(|&a, &b| probs[a].total_cmp(&probs[b])).unwrap();
            assert_eq!(best, route.index(), "{probs:?}");
        }
    }
}
