//! [`FastRouter`]: one embedding of the message, then a vote of the nearest exemplars and a
//! trained linear head, blended, with a lean towards `direct` ("when in doubt, prefer direct
//! responses").

use std::sync::Arc;

use switchyard_models::{Embedder, ModelError};

use crate::exemplars::{ExemplarError, Exemplars};
use crate::head::{Head, Row, Training};
use crate::lexical;
use crate::neighbours::Neighbours;
use crate::route::Route;

/// The classifier's knobs. The defaults are the ones measured in `data/README.md`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Neighbours that vote.
    pub k: usize,
    /// How fast a neighbour's vote fades with distance from the nearest (in cosine units).
    pub temperature: f32,
    /// Share of the linear head in the blend; the rest is the neighbours' vote.
    pub head_weight: f32,
    /// Probability mass added to `direct` before choosing: a message the two parts cannot
    /// place goes to `direct`.
    pub direct_prior: f32,
    /// Length of the word features beside the unit-length embedding (0: embedding only).
    pub lexical_weight: f32,
    /// Head training: L2 penalty, gradient steps, step size.
    pub l2: f32,
    pub steps: usize,
    pub learning_rate: f32,
    /// Follow-ups: a message of at most this many words whose own decision is weaker than
    /// `follow_up_confidence` may inherit the last turn's route (see [`FastRouter::decide`]).
    pub follow_up_words: usize,
    pub follow_up_confidence: f32,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            k: 10,
            temperature: 0.05,
            head_weight: 0.5,
            direct_prior: 0.0,
            lexical_weight: 3.0,
            l2: 1e-4,
            steps: 300,
            learning_rate: 4.0,
            follow_up_words: 6,
            follow_up_confidence: 0.75,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FastRouteError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("exemplars: {0}")]
    Exemplars(#[from] ExemplarError),
    #[error("{vectors} exemplar vectors of {dimensions} dimensions for {exemplars} exemplars")]
    Shape { vectors: usize, dimensions: usize, exemplars: usize },
}

/// The exemplar closest to the message: why the route was chosen, for logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Nearest {
    pub message: String,
    pub route: Route,
    pub similarity: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub route: Route,
    /// The chosen route's score, in 0..=1.
    pub confidence: f32,
    /// Every route's score, in [`Route::ALL`] order; they sum to 1.
    pub scores: [f32; 3],
    pub nearest: Nearest,
    /// True when the route came from the last turn (a short follow-up).
    pub from_last_turn: bool,
}

impl Decision {
    pub fn score(&self, route: Route) -> f32 {
        self.scores[route.index()]
    }
}

pub struct FastRouter {
    embedder: Arc<Embedder>,
    exemplars: Exemplars,
    neighbours: Neighbours,
    head: Head,
    tuning: Tuning,
}

impl FastRouter {
    /// Embeds the exemplars (one batch) and trains the head, with the default tuning.
    pub fn new(embedder: Arc<Embedder>, exemplars: Exemplars) -> Result<Self, FastRouteError> {
        Self::with_tuning(embedder, exemplars, Tuning::default())
    }

    pub fn with_tuning(embedder: Arc<Embedder>, exemplars: Exemplars, tuning: Tuning) -> Result<Self, FastRouteError> {
        let texts: Vec<&str> = exemplars.items().iter().map(|item| item.message.as_str()).collect();
        let vectors: Vec<f32> = embedder.embed(&texts)?.into_iter().flatten().collect();
        Self::from_vectors(embedder, exemplars, vectors, tuning)
    }

    /// A router from exemplar embeddings computed before (row-major, in the exemplars' order),
    /// so an evaluation can build one router per fold without embedding again.
    pub fn from_vectors(
        embedder: Arc<Embedder>,
        exemplars: Exemplars,
        vectors: Vec<f32>,
        tuning: Tuning,
    ) -> Result<Self, FastRouteError> {
        let dimensions = embedder.dimensions();
        if dimensions == 0 || vectors.len() != dimensions * exemplars.len() {
            return Err(FastRouteError::Shape { vectors: vectors.len(), dimensions, exemplars: exemplars.len() });
        }
        let routes: Vec<Route> = exemplars.items().iter().map(|item| item.route).collect();
        let words: Vec<Vec<(u32, f32)>> =
            exemplars.items().iter().map(|item| lexical::features(&item.message, tuning.lexical_weight)).collect();
        let rows: Vec<Row<'_>> = vectors
            .chunks_exact(dimensions)
            .zip(&words)
            .zip(&routes)
            .map(|((vector, words), &route)| Row { vector, words, route })
            .collect();
        let training = Training { l2: tuning.l2, steps: tuning.steps, learning_rate: tuning.learning_rate };
        let head = Head::train(&rows, dimensions, training);
        let neighbours = Neighbours::new(vectors, routes, dimensions);
        Ok(Self { embedder, exemplars, neighbours, head, tuning })
    }

    pub fn exemplars(&self) -> &Exemplars {
        &self.exemplars
    }

    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Routes `message`, one embedding. `last_turn` (the previous user message) matters only
    /// for a short message the classifier is unsure of, such as "and what about tomorrow?"
    /// after a weather lookup: then the last turn is embedded too, and if it confidently needs
    /// an agent, the follow-up goes the same way. A message that stands on its own never looks
    /// at the last turn, so single-message accuracy is what the evaluation measures.
    pub fn decide(&self, message: &str, last_turn: Option<&str>) -> Result<Decision, FastRouteError> {
        let own = self.decide_alone(message)?;
        self.follow_up(own, message, last_turn)
    }

    /// [`FastRouter::decide`] for a message whose embedding the caller already has (the
    /// router's cache embeds it first): the message is not embedded again.
    pub fn decide_embedded(
        &self,
        message: &str,
        vector: &[f32],
        last_turn: Option<&str>,
    ) -> Result<Decision, FastRouteError> {
        let own = self.decide_vector(message.trim(), vector);
        self.follow_up(own, message, last_turn)
    }

    /// The follow-up rule of [`FastRouter::decide`], given the message's own decision.
    fn follow_up(&self, own: Decision, message: &str, last_turn: Option<&str>) -> Result<Decision, FastRouteError> {
        let Some(last_turn) = last_turn.map(str::trim).filter(|text| !text.is_empty()) else {
            return Ok(own);
        };
        let short = message.split_whitespace().count() <= self.tuning.follow_up_words;
        if !short || own.confidence >= self.tuning.follow_up_confidence {
            return Ok(own);
        }
        let previous = self.decide_alone(last_turn)?;
        if previous.route != Route::Direct && previous.confidence >= self.tuning.follow_up_confidence {
            // The scores and nearest exemplar are the last turn's: they are why the route was chosen.
            return Ok(Decision { from_last_turn: true, ..previous });
        }
        Ok(own)
    }

    fn decide_alone(&self, message: &str) -> Result<Decision, FastRouteError> {
        let text = message.trim();
        let vectors = self.embedder.embed(&[text])?;
        let vector = vectors.first().map(Vec::as_slice).unwrap_or(&[]);
        Ok(self.decide_vector(text, vector))
    }

    /// The decision for a message whose embedding is already computed.
    pub fn decide_vector(&self, message: &str, vector: &[f32]) -> Decision {
        let tuning = &self.tuning;
        let vote = self.neighbours.vote(vector, tuning.k, tuning.temperature);
        let head = self.head.probabilities(vector, &lexical::features(message, tuning.lexical_weight));
        let weight = tuning.head_weight.clamp(0.0, 1.0);
        let mut scores = [0.0f32; 3];
        for (index, score) in scores.iter_mut().enumerate() {
            *score = weight * head[index] + (1.0 - weight) * vote.shares[index];
        }
        let prior = tuning.direct_prior.max(0.0);
        scores[Route::Direct.index()] += prior;
        scores = scores.map(|score| score / (1.0 + prior));
        // Ties go to the earlier route in `Route::ALL`, so to `direct` first.
        let mut route = Route::Direct;
        for candidate in Route::ALL {
            if scores[candidate.index()] > scores[route.index()] {
                route = candidate;
            }
        }
        let nearest = match self.exemplars.items().get(vote.nearest) {
            Some(item) => {
                Nearest { message: item.message.clone(), route: item.route, similarity: vote.nearest_similarity }
            }
            None => Nearest { message: String::new(), route: Route::Direct, similarity: 0.0 },
        };
        Decision { route, confidence: scores[route.index()], scores, nearest, from_last_turn: false }
    }

    /// The embedder, for callers that embed a message once and decide from the vector.
    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }
}
