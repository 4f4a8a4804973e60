//! A word classifier learned from usage: multinomial logistic regression over the words and
//! word pairs of past requests, each weighted by TF-IDF, trained to name the tool each request
//! led to.
//!
//! Why, next to the neighbours' vote and the query adapter: both see requests only through
//! the embedding model, which blurs the words that tell two similar tools apart ("podcast"
//! against "music", a product's name). The classifier learns which words this gateway's users
//! use for which tool; on the MetaTool dev splits it adds 0.7–2.2 points of recall@1 to the
//! prior, and no split loses recall@5 (docs/experiments/tool-retrieval.md, "Word classifier").
//!
//! Training is sparse (each request touches only the rows of its own words) with AdaGrad and
//! an L2 penalty, over a seeded shuffle, so a history always trains the same classifier.

use std::collections::HashMap;

use crate::{adapter::SplitMix64, text};

/// How the classifier learns. Defaults measured on the MetaTool dev splits.
#[derive(Debug, Clone, Copy)]
pub struct WordParams {
    /// Passes over the history.
    pub epochs: usize,
    /// AdaGrad's step size.
    pub learning_rate: f32,
    /// L2 penalty per request seen: without it the classifier trusts rare words too much
    /// (alone on by-query split 0: recall@1 0.765 at 0, 0.810 at 3e-4, 0.794 at 1e-3).
    pub regularisation: f32,
    /// At most this many weights (features × tools used): the rarest features go first, so
    /// a large catalog with a long history keeps a bounded footprint (4 bytes per weight,
    /// twice that while training). The default, 32 MB, keeps 42,000 of the 84,000 words and
    /// pairs of 13,100 MetaTool requests over 199 tools, for 0.2 points of recall@1 less
    /// than keeping them all.
    pub max_weights: usize,
    /// Fewer past requests than this, or fewer than two tools used: no classifier.
    pub min_pairs: usize,
    pub seed: u64,
}

impl Default for WordParams {
    fn default() -> Self {
        Self {
            epochs: 6,
            learning_rate: 0.5,
            regularisation: 3e-4,
            max_weights: 8 * 1024 * 1024,
            min_pairs: 20,
            seed: 0x5eed_0a5d,
        }
    }
}

/// A request as features: (feature index, TF-IDF weight), unit length.
type Features = Vec<(usize, f32)>;

#[derive(Clone)]
pub struct WordClassifier {
    /// Term or "term term" pair → feature index.
    vocabulary: HashMap<String, usize>,
    idf: Vec<f32>,
    /// Class → tool index (the tools the history used, ascending).
    tools: Vec<usize>,
    /// Features × classes, row-major.
    weights: Vec<f32>,
    bias: Vec<f32>,
}

impl std::fmt::Debug for WordClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordClassifier")
            .field("features", &self.idf.len())
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// Words and adjacent word pairs (after [`text::terms`]: stemmed, common words dropped).
fn grams(terms: &[String]) -> impl Iterator<Item = String> + '_ {
    terms.iter().cloned().chain(terms.windows(2).map(|pair| format!("{} {}", pair[0], pair[1])))
}

impl WordClassifier {
    /// Bytes held on the heap (the vocabulary and the weights).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(String, usize)>() + 1;
        self.vocabulary.capacity() * slot
            + self.vocabulary.keys().map(String::capacity).sum::<usize>()
            + (self.idf.capacity() + self.weights.capacity() + self.bias.capacity()) * std::mem::size_of::<f32>()
            + self.tools.capacity() * std::mem::size_of::<usize>()
    }

    /// Learns from `(request, tool index)` pairs; `None` when there is too little to learn
    /// from (see [`WordParams::min_pairs`]).
    pub fn learn(history: &[(impl AsRef<str>, usize)], params: WordParams) -> Option<Self> {
        let mut tools: Vec<usize> = history.iter().map(|(_, tool)| *tool).collect();
        tools.sort_unstable();
        tools.dedup();
        if history.len() < params.min_pairs || tools.len() < 2 {
            return None;
        }
        let class_of: HashMap<usize, usize> = tools.iter().enumerate().map(|(class, tool)| (*tool, class)).collect();
        let requests: Vec<Vec<String>> =
            history.iter().map(|(query, _)| grams(&text::terms(query.as_ref())).collect()).collect();

        // Document frequency per feature; the most frequent features are kept within budget.
        let mut frequency: HashMap<&str, usize> = HashMap::new();
        for request in &requests {
            let mut seen: Vec<&str> = request.iter().map(String::as_str).collect();
            seen.sort_unstable();
            seen.dedup();
            for gram in seen {
                *frequency.entry(gram).or_default() += 1;
            }
        }
        let mut ranked: Vec<(&str, usize)> = frequency.into_iter().collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        ranked.truncate((params.max_weights / tools.len()).max(1));
        let n = history.len() as f32;
        let vocabulary: HashMap<String, usize> =
            ranked.iter().enumerate().map(|(index, (gram, _))| ((*gram).to_owned(), index)).collect();
        let idf: Vec<f32> = ranked.iter().map(|(_, df)| ((1.0 + n) / (1.0 + *df as f32)).ln() + 1.0).collect();

        let classes = tools.len();
        let mut model =
            Self { vocabulary, idf, tools, weights: vec![0.0; ranked.len() * classes], bias: vec![0.0; classes] };
        let examples: Vec<(Features, usize)> =
            requests.iter().zip(history).map(|(grams, (_, tool))| (model.features(grams), class_of[tool])).collect();
        model.train(&examples, params);
        Some(model)
    }

    /// Sublinear term frequency × IDF, scaled to unit length; unknown grams are dropped.
    fn features(&self, grams: &[String]) -> Features {
        let mut counts: HashMap<usize, f32> = HashMap::new();
        for gram in grams {
            if let Some(&feature) = self.vocabulary.get(gram) {
                *counts.entry(feature).or_default() += 1.0;
            }
        }
        let mut features: Features =
            counts.into_iter().map(|(feature, count)| (feature, (1.0 + count.ln()) * self.idf[feature])).collect();
        features.sort_unstable_by_key(|(feature, _)| *feature);
        let norm = features.iter().map(|(_, v)| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            features.iter_mut().for_each(|(_, v)| *v /= norm);
        }
        features
    }

    fn logits_of(&self, features: &Features, out: &mut [f32]) {
        let classes = self.tools.len();
        out.copy_from_slice(&self.bias);
        for &(feature, value) in features {
            let row = &self.weights[feature * classes..(feature + 1) * classes];
            out.iter_mut().zip(row).for_each(|(o, w)| *o += value * w);
        }
    }

    /// Per-example AdaGrad on the cross-entropy, with the L2 penalty applied to the rows a
    /// request touches (the others' gradient is the penalty alone, which lazily waits).
    fn train(&mut self, examples: &[(Features, usize)], params: WordParams) {
        let classes = self.tools.len();
        let mut squares = vec![1e-8f32; self.weights.len()];
        let mut bias_squares = vec![1e-8f32; classes];
        let mut order: Vec<usize> = (0..examples.len()).collect();
        let mut random = SplitMix64(params.seed);
        let mut gradient = vec![0.0f32; classes];
        let rate = params.learning_rate;
        for _ in 0..params.epochs {
            random.shuffle(&mut order);
            for &index in &order {
                let (features, class) = &examples[index];
                self.logits_of(features, &mut gradient);
                softmax(&mut gradient);
                gradient[*class] -= 1.0;
                for ((b, s), g) in self.bias.iter_mut().zip(&mut bias_squares).zip(&gradient) {
                    *s += g * g;
                    *b -= rate * g / s.sqrt();
                }
                for &(feature, value) in features {
                    let range = feature * classes..(feature + 1) * classes;
                    let rows = self.weights[range.clone()].iter_mut().zip(&mut squares[range]);
                    for ((w, s), g) in rows.zip(&gradient) {
                        let step = g * value + params.regularisation * *w;
                        *s += step * step;
                        *w -= rate * step / s.sqrt();
                    }
                }
            }
        }
    }

    /// Each tool's logit for `query_terms` (as [`text::terms`] gives them), by tool index
    /// over `tool_count` tools; `None` for tools the history never used. All `None` when the
    /// request shares no feature with the history's.
    pub fn logits(&self, query_terms: &[String], tool_count: usize) -> Vec<Option<f32>> {
        let grams: Vec<String> = grams(query_terms).collect();
        let features = self.features(&grams);
        let mut out = vec![None; tool_count];
        if features.is_empty() {
            return out;
        }
        let mut logits = vec![0.0f32; self.tools.len()];
        self.logits_of(&features, &mut logits);
        for (tool, logit) in self.tools.iter().zip(logits) {
            if let Some(slot) = out.get_mut(*tool) {
                *slot = Some(logit);
            }
        }
        out
    }

    /// Features kept (words and word pairs).
    pub fn features_len(&self) -> usize {
        self.idf.len()
    }
}

fn softmax(values: &mut [f32]) {
    let max = values.iter().copied().fold(f32::MIN, f32::max);
    let mut total = 0.0;
    values.iter_mut().for_each(|v| {
        *v = (*v - max).exp();
        total += *v;
    });
    values.iter_mut().for_each(|v| *v /= total);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> Vec<(String, usize)> {
        let podcasts = ["find a podcast about history", "recommend podcast episodes", "podcast on science news"];
        let music = ["play some jazz music", "recommend music for running", "music like the beatles"];
        let mut history = Vec::new();
        for round in 0..4 {
            for (podcast, song) in podcasts.iter().zip(music) {
                history.push((format!("{podcast} {round}"), 3));
                history.push((format!("{song} {round}"), 7));
            }
        }
        history
    }

    #[test]
    fn learns_which_words_mean_which_tool() {
        let classifier = WordClassifier::learn(&history(), WordParams::default()).expect("enough history");
        let logits = classifier.logits(&text::terms("any good podcast to recommend?"), 9);
        let (podcast, music) = (logits[3].unwrap(), logits[7].unwrap());
        assert!(podcast > music + 1.0, "podcast {podcast} against music {music}");
        assert!(logits.iter().enumerate().all(|(tool, l)| l.is_some() == (tool == 3 || tool == 7)));
        let logits = classifier.logits(&text::terms("recommend music"), 9);
        assert!(logits[7].unwrap() > logits[3].unwrap() + 1.0, "{logits:?}");
    }

    #[test]
    fn unknown_words_and_little_history_give_nothing() {
        let classifier = WordClassifier::learn(&history(), WordParams::default()).expect("enough history");
        assert!(classifier.logits(&text::terms("zebra xylophone"), 9).iter().all(Option::is_none));
        assert!(WordClassifier::learn(&history()[..10], WordParams::default()).is_none());
        let one_tool: Vec<(String, usize)> = history().into_iter().filter(|(_, tool)| *tool == 3).collect();
        assert!(WordClassifier::learn(&one_tool, WordParams { min_pairs: 1, ..WordParams::default() }).is_none());
    }

    #[test]
    fn the_weight_budget_keeps_the_most_frequent_features() {
        let params = WordParams { max_weights: 2 * 4, ..WordParams::default() };
        let classifier = WordClassifier::learn(&history(), params).expect("enough history");
        assert_eq!(classifier.features_len(), 4);
        // "podcast" and "music" are among the most frequent, and still tell the tools apart.
        let logits = classifier.logits(&text::terms("podcast"), 9);
        assert!(logits[3].unwrap() > logits[7].unwrap(), "{logits:?}");
    }
}
