//! The usage prior: what past (query, tool) pairs say about a new query. The past queries most
//! like the new one vote for the tools they led to, weighted by similarity — so tools people
//! actually used for requests like this rise, whatever their descriptions say: learn from the
//! tools actually used, not only from the stated intent (docs/requirements.md#mcp-usage-records).

use std::sync::Arc;

use switchyard_models::cosine;

use crate::{
    adapter::{AdapterParams, QueryAdapter},
    bm25::{Bm25Index, Bm25Params},
    quantized::{EmbeddingRows, SharedRows},
    text::terms,
    words::{WordClassifier, WordParams},
};

/// How past queries vote. Defaults are the values measured best on the MetaTool dev split
/// (BENCHMARKS.md, "Tool retrieval").
#[derive(Debug, Clone, Copy)]
pub struct PriorParams {
    /// Past queries that vote for each new one.
    pub neighbours: usize,
    /// Embedding neighbours vote `exp((similarity − best) / temperature)`: a neighbour barely
    /// less alike than the best still counts almost fully, one far behind hardly at all.
    pub temperature: f32,
    /// Cosine similarity of the nearest past query at which the prior starts to count, and at
    /// which it counts fully: when nothing alike was seen, the prior stays out of the way
    /// instead of pushing the tools of unrelated queries.
    pub confidence_floor: f32,
    pub confidence_full: f32,
    /// How a tool's neighbours' votes add up.
    pub votes: Votes,
    /// Weight of the centroid signal against the neighbours' votes: each tool's past queries
    /// averaged into one direction, and the new query's similarity to it (scaled between the
    /// worst and best tool). Votes see the few nearest queries; the centroid sees all of them.
    pub centroid_weight: f32,
    /// What a tool nobody has used yet gets in place of votes: this share of its cold-start
    /// score (lexical + semantic, scaled so the query's best tool has 1). Without it a new
    /// tool would compete with 0 against tools that collect votes from merely similar
    /// requests.
    pub unseen_share: f32,
    /// Weight of shared words in finding neighbours by meaning: the past query's BM25 score
    /// against the new one, scaled by the best, added to its cosine (0: cosine alone). It
    /// picks and weighs the neighbours only; the confidence gate still reads the nearest
    /// cosine, because shared words with *other* tools' past requests are no sign that the
    /// history knows this request (a new tool's requests share words too, and a gate opened
    /// by them buried new tools). 0.3 lifts recall@1 by 0.9 and 1.0 points by query and no
    /// by-tool split loses recall@1 (docs/experiments/tool-retrieval.md, "Shared words pick the neighbours").
    pub lexical_neighbours: f32,
    /// Weight of the query adapter's signal against the neighbours' votes: a map of request
    /// embeddings learned from the whole history ([`crate::adapter`]), and for each used tool
    /// `exp((cosine − best) / temperature)` of the mapped request (the adapter's own softmax
    /// temperature; the best used tool gets 1). 0: no adapter is learned.
    pub adapter_weight: f32,
    /// How the adapter learns.
    pub adapter: AdapterParams,
    /// What a used tool's prior falls back to when the votes are not trusted: its votes
    /// scaled by the confidence plus `(1 − confidence)` × its stand-in (the same
    /// [`unseen_share`](Self::unseen_share) of its cold-start score a never-used tool gets).
    /// Without it a request unlike anything seen gives never-used tools their stand-ins while
    /// the used ones get nothing, which buries the used tools.
    pub cold_fallback: bool,
    /// Neighbours and centroids are found among the past requests as the adapter maps them
    /// (and the new request mapped the same way), rather than as the model embeds them.
    pub adapted_neighbours: bool,
    /// Weight of the word classifier's vote against the neighbours' ([`crate::words`]): for
    /// each used tool `exp((logit − best) / word_temperature)`, so the tool whose words the
    /// request shares gets 1. 0: no classifier is learned.
    pub word_weight: f32,
    pub word_temperature: f32,
    /// How the word classifier learns.
    pub words: WordParams,
}

/// How the votes of several neighbours for one tool combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Votes {
    /// Summed: a tool many neighbours used rises above one a single neighbour used.
    Sum,
    /// The best one only: each tool is as good as its closest past query, so a tool used
    /// often in the past does not outvote a rarer one that fits better.
    Best,
}

/// Neighbours consulted per query ([`PriorParams::neighbours`] of the defaults): with votes
/// weighted by similarity (temperature 0.1) far ones hardly count, so more neighbours
/// widen the net (10 → 50 on the dev split, with the other defaults: recall@5 0.951 → 0.955,
/// recall@1 0.826 → 0.820; recall@5 is what decides which tools a model gets to see).
pub const NEIGHBOURS: usize = 50;

impl Default for PriorParams {
    fn default() -> Self {
        Self {
            neighbours: NEIGHBOURS,
            temperature: 0.1,
            // Unrelated MiniLM sentences sit around 0.1–0.3, paraphrases above 0.6.
            confidence_floor: 0.3,
            confidence_full: 0.6,
            votes: Votes::Sum,
            centroid_weight: 0.5,
            unseen_share: 1.0,
            lexical_neighbours: 0.3,
            adapter_weight: 0.5,
            adapter: AdapterParams::default(),
            adapted_neighbours: true,
            cold_fallback: false,
            word_weight: 1.0,
            word_temperature: 2.0,
            words: WordParams::default(),
        }
    }
}

pub struct UsagePrior {
    index: Bm25Index,
    /// Unit-length embeddings of the past queries, when available: neighbours are then found
    /// by meaning rather than shared words. Int8 rows read where they are kept (the gateway's
    /// loaded history), not copied: with a long history they are most of its bytes.
    embeddings: Option<SharedRows>,
    /// When neighbours are found among the past queries as a query adapter maps them
    /// ([`PriorParams::adapted_neighbours`]): the adapter and each entry's `1 / length` once
    /// mapped. A mapped entry's cosine with a mapped query is then the entry's dot with the
    /// query mapped back ([`QueryAdapter::transpose_apply`]) over its mapped length, so the
    /// mapped entries are never stored.
    mapped: Option<(Arc<QueryAdapter>, Vec<f32>)>,
    /// Per tool, the unit-length mean of its past queries' embeddings (None: never used).
    centroids: Vec<Option<Vec<f32>>>,
    tool_of: Vec<usize>,
    /// Past queries per tool.
    uses: Vec<usize>,
    tool_count: usize,
    /// Learned when [`PriorParams::word_weight`] is on and the history is large enough.
    words: Option<WordClassifier>,
    params: PriorParams,
}

impl UsagePrior {
    /// Learns from `(query, tool index)` pairs; `neighbours` past queries vote for each new one.
    pub fn learn(history: &[(impl AsRef<str>, usize)], tool_count: usize, neighbours: usize) -> Self {
        Self::learn_with(history, tool_count, PriorParams { neighbours, ..PriorParams::default() })
    }

    /// Learns from `(query, tool index)` pairs, voting as `params` say.
    pub fn learn_with(history: &[(impl AsRef<str>, usize)], tool_count: usize, params: PriorParams) -> Self {
        let documents: Vec<Vec<String>> = history.iter().map(|(query, _)| terms(query.as_ref())).collect();
        Self {
            index: Bm25Index::build(&documents, Bm25Params::default()),
            embeddings: None,
            mapped: None,
            centroids: Vec::new(),
            tool_of: history.iter().map(|(_, tool)| *tool).collect(),
            uses: history.iter().fold(vec![0; tool_count], |mut uses, (_, tool)| {
                if let Some(count) = uses.get_mut(*tool) {
                    *count += 1;
                }
                uses
            }),
            tool_count,
            words: (params.word_weight > 0.0).then(|| WordClassifier::learn(history, params.words)).flatten(),
            params: PriorParams { neighbours: params.neighbours.max(1), ..params },
        }
    }

    /// Finds neighbours by cosine similarity of these embeddings (one per history entry, in
    /// order) instead of by shared words. They are quantised for the prior.
    pub fn with_embeddings(self, embeddings: Vec<Vec<f32>>) -> Self {
        match SharedRows::quantize(&embeddings) {
            Some(rows) => self.with_shared_rows(rows, None),
            None => self,
        }
    }

    /// [`with_embeddings`](Self::with_embeddings) from rows kept elsewhere, one per history
    /// entry, read in place; as `adapter` maps them when given (and of their dimensions).
    /// Each row is read back to f32 once, to add it to its tool's centroid (the centroids stay
    /// f32: one per tool). Left without embeddings unless there is one row per entry.
    pub fn with_shared_rows(mut self, rows: SharedRows, adapter: Option<Arc<QueryAdapter>>) -> Self {
        if rows.len() != self.tool_of.len() {
            return self;
        }
        let adapter = adapter.filter(|adapter| adapter.dimensions() == rows.dimensions());
        let mut inverse_lengths = Vec::with_capacity(if adapter.is_some() { rows.len() } else { 0 });
        let mut sums: Vec<Option<Vec<f32>>> = vec![None; self.tool_count];
        let mut row = Vec::with_capacity(rows.dimensions());
        for (entry, &tool) in self.tool_of.iter().enumerate() {
            row.clear();
            rows.extend_row(entry, &mut row);
            let mapped = adapter.as_ref().and_then(|adapter| adapter.apply_with_length(&row));
            let embedding = match &mapped {
                Some((unit, length)) => {
                    inverse_lengths.push(if *length > 0.0 { 1.0 / length } else { 0.0 });
                    unit
                }
                None => &row,
            };
            let Some(sum) = sums.get_mut(tool) else { return self };
            let sum = sum.get_or_insert_with(|| vec![0.0; embedding.len()]);
            sum.iter_mut().zip(embedding).for_each(|(s, e)| *s += e);
        }
        for sum in sums.iter_mut().flatten() {
            let norm = cosine(sum, sum).sqrt().max(1e-12);
            sum.iter_mut().for_each(|s| *s /= norm);
        }
        self.centroids = sums;
        self.embeddings = Some(rows);
        self.mapped = adapter.map(|adapter| (adapter, inverse_lengths));
        self
    }

    /// Bytes held on the heap: the past requests' word index and what it holds of their
    /// embeddings (not rows it shares: [`SharedRows::heap_bytes`]), the centroids and the
    /// word classifier.
    pub fn heap_bytes(&self) -> usize {
        let f32s = std::mem::size_of::<f32>();
        self.index.heap_bytes()
            + self.embeddings.as_ref().map_or(0, SharedRows::heap_bytes)
            + self.mapped.as_ref().map_or(0, |(_, lengths)| lengths.capacity() * f32s)
            + self.centroids.capacity() * std::mem::size_of::<Option<Vec<f32>>>()
            + self.centroids.iter().flatten().map(|c| c.capacity() * f32s).sum::<usize>()
            + (self.tool_of.capacity() + self.uses.capacity()) * std::mem::size_of::<usize>()
            + self.words.as_ref().map_or(0, WordClassifier::heap_bytes)
    }

    /// A score per tool in [0, 1] (the best-voted tool gets the prior's confidence, 1 when a
    /// past query is close; all 0 when nothing is alike). `query_embedding` is used when the
    /// prior has history embeddings; `adapted` is each tool's cosine with the query as the
    /// [`QueryAdapter`](crate::adapter::QueryAdapter) maps it, when there is one.
    pub fn prior(&self, query_terms: &[String], query_embedding: Option<&[f32]>, adapted: Option<&[f32]>) -> Vec<f32> {
        self.prior_and_confidence(query_terms, query_embedding, adapted).0
    }

    /// [`prior`](Self::prior) and the confidence its votes were scaled by (0 when no past
    /// query is alike, 1 when one is close).
    pub fn prior_and_confidence(
        &self,
        query_terms: &[String],
        query_embedding: Option<&[f32]>,
        adapted: Option<&[f32]>,
    ) -> (Vec<f32>, f32) {
        let mut votes = vec![0.0f32; self.tool_count];
        if self.tool_of.is_empty() {
            return (votes, 0.0);
        }
        // With embeddings, also the nearest past query by meaning alone, which the confidence
        // gate reads (None: neighbours are found by shared words only).
        let (scores, nearest_cosine) = match (&self.embeddings, query_embedding) {
            (Some(embeddings), Some(query)) => {
                let mut scores: Vec<f32> = match &self.mapped {
                    Some((adapter, inverse_lengths)) => {
                        // Empty for a query of another length: every dot is then 0.
                        let back = adapter.transpose_apply(query).unwrap_or_default();
                        inverse_lengths
                            .iter()
                            .enumerate()
                            .map(|(i, inverse)| embeddings.dot(i, &back) * inverse)
                            .collect()
                    }
                    None => (0..embeddings.len()).map(|i| embeddings.dot(i, query)).collect(),
                };
                let nearest_cosine = scores.iter().copied().fold(f32::MIN, f32::max);
                if self.params.lexical_neighbours > 0.0 {
                    let words = self.index.scores(query_terms);
                    let best = words.iter().copied().fold(0.0f32, f32::max);
                    if best > 0.0 {
                        let weight = self.params.lexical_neighbours / best;
                        scores.iter_mut().zip(words).for_each(|(s, w)| *s += weight * w);
                    }
                }
                (scores, Some(nearest_cosine))
            }
            _ => (self.index.scores(query_terms), None),
        };
        let by_meaning = nearest_cosine.is_some();
        let mut ranked: Vec<(usize, f32)> = scores.into_iter().enumerate().filter(|(_, s)| *s > 0.0).collect();
        let keep = self.params.neighbours.min(ranked.len());
        if keep == 0 {
            return (votes, 0.0);
        }
        if ranked.len() > keep {
            ranked.select_nth_unstable_by(keep - 1, |a, b| b.1.total_cmp(&a.1));
            ranked.truncate(keep);
        }
        let nearest = ranked.iter().map(|(_, s)| *s).fold(0.0f32, f32::max);
        for (entry, score) in ranked {
            // BM25 scores have no fixed scale, so word neighbours vote their score as is.
            let vote = if by_meaning && self.params.temperature.is_finite() {
                ((score - nearest) / self.params.temperature).exp()
            } else {
                score
            };
            let tool = &mut votes[self.tool_of[entry]];
            *tool = match self.params.votes {
                Votes::Sum => *tool + vote,
                Votes::Best => tool.max(vote),
            };
        }
        let best = votes.iter().copied().fold(0.0f32, f32::max);
        if best > 0.0 {
            votes.iter_mut().for_each(|v| *v /= best);
        }
        let mut total = 1.0;
        if let (true, Some(query)) = (by_meaning && self.params.centroid_weight > 0.0, query_embedding) {
            let similarities: Vec<f32> =
                self.centroids.iter().map(|c| c.as_deref().map_or(f32::NAN, |c| cosine(c, query))).collect();
            if self.add_scaled(&mut votes, &similarities, self.params.centroid_weight) {
                total += self.params.centroid_weight;
            }
        }
        if let (true, Some(adapted)) = (by_meaning && self.params.adapter_weight > 0.0, adapted) {
            // Only tools with history (the adapter learned nothing about the others), each as
            // likely as the adapter's softmax makes it against the best: sharp, like the
            // neighbours' votes, so that a tool nobody used yet still competes through its
            // stand-in.
            let used = adapted.iter().enumerate().map(|(tool, s)| (self.uses(tool) > 0).then_some(*s));
            let temperature = self.params.adapter.temperature;
            if add_sharpened(&mut votes, used, self.params.adapter_weight, temperature) {
                total += self.params.adapter_weight;
            }
        }
        if let Some(words) = &self.words {
            let logits = words.logits(query_terms, self.tool_count);
            let weight = self.params.word_weight;
            if add_sharpened(&mut votes, logits.iter().copied(), weight, self.params.word_temperature) {
                total += weight;
            }
        }
        if total > 1.0 {
            votes.iter_mut().for_each(|v| *v /= total);
        }
        let confidence = nearest_cosine.map_or(1.0, |nearest| self.confidence(nearest));
        votes.iter_mut().for_each(|v| *v *= confidence);
        (votes, confidence)
    }

    /// Adds `weight` × each similarity scaled between the worst and the best (NaN: left
    /// out); false when they do not spread (nothing added).
    fn add_scaled(&self, votes: &mut [f32], similarities: &[f32], weight: f32) -> bool {
        let (low, high) =
            similarities.iter().filter(|s| !s.is_nan()).fold((f32::MAX, f32::MIN), |(l, h), s| (l.min(*s), h.max(*s)));
        if high <= low {
            return false;
        }
        for (vote, similarity) in votes.iter_mut().zip(similarities) {
            if !similarity.is_nan() {
                *vote += weight * (similarity - low) / (high - low);
            }
        }
        true
    }

    /// The word classifier, when one was learned.
    pub fn words(&self) -> Option<&WordClassifier> {
        self.words.as_ref()
    }

    /// How many past queries led to `tool`.
    pub fn uses(&self, tool: usize) -> usize {
        self.uses.get(tool).copied().unwrap_or(0)
    }

    /// How much to trust the votes, from the similarity of the nearest past query.
    fn confidence(&self, nearest: f32) -> f32 {
        let PriorParams { confidence_floor: floor, confidence_full: full, .. } = self.params;
        if full > floor { ((nearest - floor) / (full - floor)).clamp(0.0, 1.0) } else { 1.0 }
    }
}

/// Adds `weight` × `exp((score − best) / temperature)` for each tool with a score (a softmax
/// against the best, so a tool well behind the best adds almost nothing); false when no tool
/// has one (nothing added). `scores` is walked twice, the best found first: it is cloned, not
/// collected, so a vote allocates nothing.
fn add_sharpened(
    votes: &mut [f32],
    scores: impl Iterator<Item = Option<f32>> + Clone,
    weight: f32,
    temperature: f32,
) -> bool {
    let Some(best) = scores.clone().flatten().reduce(f32::max) else { return false };
    let temperature = temperature.max(1e-4);
    for (vote, score) in votes.iter_mut().zip(scores) {
        if let Some(score) = score {
            *vote += weight * ((score - best) / temperature).exp();
        }
    }
    true
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
        let votes = prior.prior(&terms("any flights to rome?"), None, None);
        assert_eq!(votes[0], 1.0);
        assert_eq!(votes[2], 0.0, "a tool nobody used gets no vote");
        assert!(votes[1] < votes[0]);
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    #[test]
    fn embedding_neighbours_vote_only_when_something_alike_was_seen() {
        let history = vec![("a".to_owned(), 0), ("b".to_owned(), 0), ("c".to_owned(), 1)];
        let embeddings = vec![unit(&[1.0, 0.1, 0.0]), unit(&[1.0, 0.2, 0.0]), unit(&[0.0, 1.0, 0.0])];
        let prior = UsagePrior::learn_with(&history, 3, PriorParams::default()).with_embeddings(embeddings);
        let near = prior.prior(&[], Some(&unit(&[1.0, 0.15, 0.0])), None);
        assert!(near[0] > 0.9 && near[1] < near[0] && near[2] == 0.0, "{near:?}");
        // Nothing in the history is within the confidence floor of this query: no push at all.
        let unrelated = prior.prior(&[], Some(&unit(&[0.2, 0.2, 1.0])), None);
        assert!(unrelated.iter().all(|v| *v == 0.0), "{unrelated:?}");
    }

    /// Past requests for two tools that the embedding cannot tell apart: the word classifier's
    /// vote (on by default) sends a request with one tool's words to that tool.
    #[test]
    fn the_word_classifier_votes_for_the_tool_whose_words_a_request_uses() {
        let mut history = Vec::new();
        for round in 0..12 {
            history.push((format!("recommend podcast episodes {round}"), 0));
            history.push((format!("recommend music albums {round}"), 1));
        }
        let embeddings = vec![unit(&[1.0, 0.0, 0.0]); history.len()];
        let query = terms("a podcast to recommend");
        let vote = |word_weight| {
            let params =
                PriorParams { word_weight, centroid_weight: 0.0, lexical_neighbours: 0.0, ..PriorParams::default() };
            let prior = UsagePrior::learn_with(&history, 2, params).with_embeddings(embeddings.clone());
            assert_eq!(prior.words().is_some(), word_weight > 0.0);
            prior.prior(&query, Some(&unit(&[1.0, 0.0, 0.0])), None)
        };
        let neighbours_only = vote(0.0);
        assert!((neighbours_only[0] - neighbours_only[1]).abs() < 1e-6, "{neighbours_only:?}");
        let with_words = vote(1.0);
        assert!(with_words[0] > with_words[1] + 0.2, "{with_words:?}");
    }

    /// Two past queries equally alike by meaning: shared words decide between them only when
    /// `lexical_neighbours` is on.
    #[test]
    fn shared_words_break_ties_between_neighbours_when_asked() {
        let history = vec![("convert euros to dollars".to_owned(), 0), ("exchange rate for yen".to_owned(), 1)];
        let embeddings = vec![unit(&[1.0, 0.1, 0.0]), unit(&[1.0, -0.1, 0.0])];
        let query = terms("euros to dollars today");
        let vote = |lexical_neighbours| {
            let params = PriorParams { lexical_neighbours, centroid_weight: 0.0, ..PriorParams::default() };
            UsagePrior::learn_with(&history, 2, params).with_embeddings(embeddings.clone()).prior(
                &query,
                Some(&unit(&[1.0, 0.0, 0.0])),
                None,
            )
        };
        let plain = vote(0.0);
        assert!((plain[0] - plain[1]).abs() < 1e-6, "equally alike by meaning: {plain:?}");
        let lexical = vote(0.3);
        assert!(lexical[0] > 0.99 && lexical[1] < 0.1, "the query sharing words leads: {lexical:?}");
    }

    /// Shared words choose among neighbours but never open the confidence gate: a request
    /// unlike every past one by meaning gets no push, however many words it shares with them.
    #[test]
    fn shared_words_alone_do_not_make_the_prior_confident() {
        let history = vec![("convert euros to dollars".to_owned(), 0), ("euros dollars rates".to_owned(), 1)];
        let embeddings = vec![unit(&[1.0, 0.0, 0.0]), unit(&[1.0, 0.1, 0.0])];
        let params = PriorParams { lexical_neighbours: 1.0, ..PriorParams::default() };
        let prior = UsagePrior::learn_with(&history, 2, params).with_embeddings(embeddings);
        // Cosine 0.2 to both past queries (under the 0.3 floor); the words would add up to 1.
        let (votes, confidence) =
            prior.prior_and_confidence(&terms("euros to dollars"), Some(&unit(&[0.2, 0.0, 0.98])), None);
        assert_eq!(confidence, 0.0);
        assert!(votes.iter().all(|v| *v == 0.0), "{votes:?}");
    }

    /// Neighbours found through a query adapter from the rows as they are kept (the query
    /// mapped back, each row's mapped length) vote as from the rows mapped and stored, within
    /// the int8 rounding either way.
    #[test]
    fn neighbours_through_an_adapter_vote_as_from_the_mapped_rows() {
        use crate::adapter::AdapterParams;
        let tools = vec![unit(&[1.0, 0.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0, 0.0]), unit(&[0.0, 0.0, 1.0, 0.0])];
        let (mut history, mut embeddings) = (Vec::new(), Vec::new());
        for i in 0..30 {
            let wobble = (i % 5) as f32 * 0.05;
            history.push((format!("request a {i}"), 0));
            embeddings.push(unit(&[0.3, 0.5, wobble, 1.0]));
            history.push((format!("request b {i}"), 1));
            embeddings.push(unit(&[0.0, 1.0, wobble, 0.1]));
        }
        let used: Vec<usize> = history.iter().map(|(_, tool)| *tool).collect();
        let params = AdapterParams { batch: 16, steps: 200, learning_rate: 0.02, ..AdapterParams::default() };
        let adapter = Arc::new(QueryAdapter::learn(&embeddings, &used, &tools, params).expect("learns"));

        let x = unit(&[0.3, 0.5, 0.1, 1.0]);
        let v = unit(&[0.2, -0.4, 0.9, 0.1]);
        let (mapped, length) = adapter.apply_with_length(&x).expect("same length");
        let back = adapter.transpose_apply(&v).expect("same length");
        assert!((cosine(&x, &back) / length - cosine(&mapped, &v)).abs() < 1e-5, "x · Wᵀv = Wx · v");

        let params = PriorParams { word_weight: 0.0, lexical_neighbours: 0.0, ..PriorParams::default() };
        let mapped: Vec<Vec<f32>> = embeddings.iter().map(|e| adapter.apply(e).expect("same length")).collect();
        let stored = UsagePrior::learn_with(&history, 3, params).with_embeddings(mapped);
        let rows = SharedRows::quantize(&embeddings).expect("one length");
        let shared = UsagePrior::learn_with(&history, 3, params).with_shared_rows(rows, Some(Arc::clone(&adapter)));
        for query in [unit(&[0.32, 0.48, 0.07, 0.95]), unit(&[0.05, 1.0, 0.1, 0.12]), unit(&[0.2, 0.2, 1.0, 0.0])] {
            let query = adapter.apply(&query).expect("same length");
            let (expected, expected_confidence) = stored.prior_and_confidence(&[], Some(&query), None);
            let (votes, confidence) = shared.prior_and_confidence(&[], Some(&query), None);
            assert!((confidence - expected_confidence).abs() < 0.02, "{confidence} against {expected_confidence}");
            for (vote, expected_vote) in votes.iter().zip(&expected) {
                assert!((vote - expected_vote).abs() < 0.02, "{votes:?} against {expected:?}");
            }
        }
    }
}
