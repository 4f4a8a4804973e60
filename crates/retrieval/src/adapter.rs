//! A query adapter learned from usage: a linear map applied to a request's embedding before
//! its cosine with the tools' embeddings, trained so that past requests land nearest the tool
//! they led to. The embedding model stays frozen; what the adapter learns is how this
//! gateway's users phrase what each tool does ("find me a cheap flight" and a tool described
//! as "searches airline fares"), which the nearest-neighbour vote only sees through requests
//! that happen to be alike.
//!
//! Training: a softmax over the tools that appear in the history (temperature
//! [`AdapterParams::temperature`]), minibatches of past requests, Adam, and an L2 pull of the
//! map towards the identity ([`AdapterParams::strength`]) so that a small history cannot
//! carry the embedding far from what the model knows. Tools nobody has used yet are not in
//! the softmax: the adapter is not taught to push requests away from them.

use candle_core::{DType, Device, Tensor};
use sha2::{Digest, Sha256};
use switchyard_models::cache_file::ModelDigest;

use crate::quantized::EmbeddingRows;

/// How the adapter learns. The defaults were measured on the MetaTool dev split
/// (docs/experiments/tool-retrieval.md, "Query adapters in the product").
#[derive(Debug, Clone, Copy)]
pub struct AdapterParams {
    /// Pull towards the identity (L2 on `W − I`): small lets the map follow the history
    /// closely (best for requests like past ones), large keeps it near the model (best for
    /// tools with little history).
    pub strength: f32,
    /// Softmax temperature over cosines (cosines span little more than [0, 1]).
    pub temperature: f32,
    /// Optimisation steps, each over one minibatch.
    pub steps: usize,
    pub batch: usize,
    pub learning_rate: f32,
    /// Fewer past requests than this, or fewer than two tools used: no adapter.
    pub min_pairs: usize,
    /// Seeds the order minibatches are drawn in, so a history always trains the same map.
    pub seed: u64,
}

impl Default for AdapterParams {
    fn default() -> Self {
        Self {
            strength: 0.01,
            temperature: 0.05,
            steps: 300,
            batch: 256,
            learning_rate: 1e-3,
            min_pairs: 20,
            seed: 0x5eed_ada9,
        }
    }
}

impl AdapterParams {
    /// For an adapter learned from one catalog's requests and shipped for others (the
    /// gateway's base adapter): held ten times closer to the identity, which on tools never
    /// seen in training lifts recall instead of costing it (BENCHMARKS.md).
    pub fn base() -> Self {
        Self { strength: 0.1, ..Self::default() }
    }
}

/// A learned `dimensions × dimensions` map (row-major: output by input).
#[derive(Clone)]
pub struct QueryAdapter {
    dimensions: usize,
    matrix: Vec<f32>,
    provenance: Provenance,
}

impl std::fmt::Debug for QueryAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryAdapter").field("dimensions", &self.dimensions).finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("{0} past requests with embeddings, {1} tools used: too little to learn from")]
    TooLittleHistory(usize, usize),
    #[error("embeddings of different lengths ({0} and {1})")]
    Dimensions(usize, usize),
    #[error("training: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("not a query adapter file, or a damaged one ({0})")]
    Corrupt(&'static str),
    #[error("an adapter file of version {0}; this build reads version {VERSION}")]
    Version(u32),
    #[error("the adapter was learned for another embedding model")]
    OtherModel,
}

/// The adapter file: little-endian, a SHA-256 over everything before it at the end.
///
/// ```text
/// magic "SYADAPT\0" · version u32 · model digest [32] · dimensions u32 · pairs u32 ·
/// tools u32 · strength f32 · dimensions² × f32 (row-major) · SHA-256 [32]
/// ```
const MAGIC: &[u8; 8] = b"SYADAPT\0";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 8 + 4 + 32 + 4 + 4 + 4 + 4;

/// What an adapter was learned from, as its file records it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Provenance {
    pub pairs: u32,
    pub tools: u32,
    pub strength: f32,
}

impl QueryAdapter {
    /// Learns from past requests' unit-length `queries`, the tool index each led to
    /// (`used[i]` for `queries[i]`), and the tools' unit-length embeddings. The queries are
    /// read a minibatch at a time ([`EmbeddingRows`]): int8 rows are never all held as f32.
    pub fn learn<Q: EmbeddingRows + ?Sized>(
        queries: &Q,
        used: &[usize],
        tools: &[Vec<f32>],
        params: AdapterParams,
    ) -> Result<Self, AdapterError> {
        // (query entry, tool) for each pair whose tool is known.
        let pairs: Vec<(usize, usize)> = (0..queries.rows().min(used.len()))
            .filter(|entry| used[*entry] < tools.len())
            .map(|entry| (entry, used[entry]))
            .collect();
        let mut classes: Vec<usize> = pairs.iter().map(|(_, tool)| *tool).collect();
        classes.sort_unstable();
        classes.dedup();
        if pairs.len() < params.min_pairs.max(1) || classes.len() < 2 {
            return Err(AdapterError::TooLittleHistory(pairs.len(), classes.len()));
        }
        let dimensions = queries.row_len(pairs[0].0);
        for length in pairs.iter().map(|(q, _)| queries.row_len(*q)).chain(classes.iter().map(|c| tools[*c].len())) {
            if length != dimensions {
                return Err(AdapterError::Dimensions(dimensions, length));
            }
        }
        // Each pair's tool as its position among the tools used.
        let class_of: Vec<usize> =
            pairs.iter().map(|(_, tool)| classes.binary_search(tool).unwrap_or_default()).collect();
        let device = Device::Cpu;
        let targets: Vec<f32> = classes.iter().flat_map(|c| tools[*c].iter().copied()).collect();
        let targets = Tensor::from_vec(targets, (classes.len(), dimensions), &device)?;
        let targets_t = targets.t()?.contiguous()?;
        let identity = Tensor::eye(dimensions, DType::F32, &device)?;

        let mut weights = identity.clone();
        let mut first_moment = Tensor::zeros((dimensions, dimensions), DType::F32, &device)?;
        let mut second_moment = first_moment.clone();
        let (beta1, beta2, epsilon) = (0.9f64, 0.999f64, 1e-8f64);
        let batch = params.batch.clamp(1, pairs.len());
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        let mut random = SplitMix64(params.seed);
        let mut cursor = order.len();
        let inverse_temperature = 1.0 / f64::from(params.temperature.max(1e-4));
        for step in 1..=params.steps {
            // Minibatches walk a fresh shuffle of the history each epoch.
            let mut chosen = Vec::with_capacity(batch);
            while chosen.len() < batch {
                if cursor == order.len() {
                    random.shuffle(&mut order);
                    cursor = 0;
                }
                chosen.push(order[cursor]);
                cursor += 1;
            }
            let mut rows = Vec::with_capacity(batch * dimensions);
            for i in &chosen {
                queries.extend_row(pairs[*i].0, &mut rows);
            }
            let rows = Tensor::from_vec(rows, (batch, dimensions), &device)?;
            let mut one_hot = vec![0.0f32; batch * classes.len()];
            for (row, i) in chosen.iter().enumerate() {
                one_hot[row * classes.len() + class_of[*i]] = 1.0;
            }
            let one_hot = Tensor::from_vec(one_hot, (batch, classes.len()), &device)?;

            // Forward: adapted, normalized rows; their softmax over the tools' cosines.
            let adapted = rows.matmul(&weights.t()?)?;
            let norms = adapted.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
            let unit = adapted.broadcast_div(&norms)?;
            let logits = (unit.matmul(&targets_t)? * inverse_temperature)?;
            let logits = logits.broadcast_sub(&logits.max_keepdim(1)?)?;
            let exp = logits.exp()?;
            let probabilities = exp.broadcast_div(&exp.sum_keepdim(1)?)?;

            // Backward: the cross-entropy's gradient through the cosine and the norm.
            let over_logits = ((probabilities - one_hot)? * (inverse_temperature / batch as f64))?;
            let over_unit = over_logits.matmul(&targets)?;
            let along = over_unit.mul(&unit)?.sum_keepdim(1)?;
            let over_adapted = (over_unit - unit.broadcast_mul(&along)?)?.broadcast_div(&norms)?;
            let gradient = over_adapted.t()?.matmul(&rows)?;
            let gradient = (gradient + ((&weights - &identity)? * f64::from(params.strength))?)?;

            first_moment = ((first_moment * beta1)? + (&gradient * (1.0 - beta1))?)?;
            second_moment = ((second_moment * beta2)? + (gradient.sqr()? * (1.0 - beta2))?)?;
            let corrected_first = (&first_moment / (1.0 - beta1.powi(step as i32)))?;
            let corrected_second = (&second_moment / (1.0 - beta2.powi(step as i32)))?;
            let update = corrected_first.div(&(corrected_second.sqrt()? + epsilon)?)?;
            weights = (weights - (update * f64::from(params.learning_rate))?)?;
        }
        let matrix = weights.flatten_all()?.to_vec1::<f32>()?;
        let provenance = Provenance {
            pairs: u32::try_from(pairs.len()).unwrap_or(u32::MAX),
            tools: u32::try_from(classes.len()).unwrap_or(u32::MAX),
            strength: params.strength,
        };
        Ok(Self { dimensions, matrix, provenance })
    }

    /// The adapter shipped with the gateway: learned from the public MetaTool dev queries
    /// (16,384 requests for 199 tools; `switchyard-tool-eval --save-base-adapter`, strength
    /// 0.1) for all-MiniLM-L6-v2. Refused for any other model's embeddings.
    pub fn shipped(model: &ModelDigest) -> Result<Self, AdapterError> {
        Self::from_bytes(include_bytes!("../data/base-adapter.bin"), model)
    }

    /// The adapter file's bytes, for embeddings of `model`.
    pub fn to_bytes(&self, model: &ModelDigest) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 4 * self.matrix.len() + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(model.as_bytes());
        out.extend_from_slice(&u32::try_from(self.dimensions).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.provenance.pairs.to_le_bytes());
        out.extend_from_slice(&self.provenance.tools.to_le_bytes());
        out.extend_from_slice(&self.provenance.strength.to_le_bytes());
        for value in &self.matrix {
            out.extend_from_slice(&value.to_le_bytes());
        }
        let digest: [u8; 32] = Sha256::digest(&out).into();
        out.extend_from_slice(&digest);
        out
    }

    /// Reads an adapter file, refusing it whole if it is damaged, of another version, or
    /// learned for another model than `model`.
    pub fn from_bytes(bytes: &[u8], model: &ModelDigest) -> Result<Self, AdapterError> {
        if bytes.len() < HEADER_BYTES + 32 || &bytes[..8] != MAGIC {
            return Err(AdapterError::Corrupt("no adapter header"));
        }
        let (body, digest) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body)[..] != *digest {
            return Err(AdapterError::Corrupt("checksum"));
        }
        let word = |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let version = word(8);
        if version != VERSION {
            return Err(AdapterError::Version(version));
        }
        if &body[12..44] != model.as_bytes() {
            return Err(AdapterError::OtherModel);
        }
        let dimensions = word(44) as usize;
        let provenance = Provenance { pairs: word(48), tools: word(52), strength: f32::from_bits(word(56)) };
        let values = &body[HEADER_BYTES..];
        if dimensions == 0 || values.len() != 4 * dimensions * dimensions {
            return Err(AdapterError::Corrupt("matrix size"));
        }
        let matrix = values.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Self { dimensions, matrix, provenance })
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    pub fn provenance(&self) -> Provenance {
        self.provenance
    }

    /// The adapted, unit-length query (`None` when its length is not the adapter's).
    pub fn apply(&self, query: &[f32]) -> Option<Vec<f32>> {
        self.apply_with_length(query).map(|(out, _)| out)
    }

    /// [`apply`](Self::apply), and the length of the mapped query before it was scaled to
    /// unit length.
    pub fn apply_with_length(&self, query: &[f32]) -> Option<(Vec<f32>, f32)> {
        if query.len() != self.dimensions {
            return None;
        }
        let mut out: Vec<f32> =
            self.matrix.chunks_exact(self.dimensions).map(|row| switchyard_models::cosine(row, query)).collect();
        let norm = switchyard_models::cosine(&out, &out).sqrt();
        if norm > 0.0 {
            out.iter_mut().for_each(|v| *v /= norm);
        }
        Some((out, norm))
    }

    /// The transposed map applied to `vector` (not scaled): `x · transpose(v) = map(x) · v`
    /// for any `x`, so a mapped query's cosines with many mapped rows are the dots of this
    /// with the rows as they are, each divided by its mapped length — the rows need not be
    /// kept mapped. None when its length is not the adapter's.
    pub fn transpose_apply(&self, vector: &[f32]) -> Option<Vec<f32>> {
        if vector.len() != self.dimensions {
            return None;
        }
        let mut out = vec![0.0f32; self.dimensions];
        for (row, v) in self.matrix.chunks_exact(self.dimensions).zip(vector) {
            out.iter_mut().zip(row).for_each(|(o, w)| *o += v * w);
        }
        Some(out)
    }
}

/// A small deterministic generator for shuffling minibatches (no statistical demands beyond
/// "not in history order").
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn shuffle(&mut self, items: &mut [usize]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    fn nearest(query: &[f32], tools: &[Vec<f32>]) -> usize {
        let scores: Vec<f32> = tools.iter().map(|t| switchyard_models::cosine(t, query)).collect();
        (0..tools.len()).max_by(|a, b| scores[*a].total_cmp(&scores[*b])).unwrap_or_default()
    }

    /// Requests for tool 0 are phrased along an axis its description does not mention (they
    /// sit nearer tool 1 at first); after learning, such requests — including new ones the
    /// adapter never saw — land nearest tool 0, while requests for tool 1 stay with tool 1.
    #[test]
    fn learns_how_requests_for_a_tool_are_phrased() {
        let tools = vec![unit(&[1.0, 0.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0, 0.0]), unit(&[0.0, 0.0, 1.0, 0.0])];
        let mut queries = Vec::new();
        let mut used = Vec::new();
        for i in 0..30 {
            let wobble = (i % 5) as f32 * 0.05;
            queries.push(unit(&[0.3, 0.5, wobble, 1.0]));
            used.push(0);
            queries.push(unit(&[0.0, 1.0, wobble, 0.1]));
            used.push(1);
        }
        let fresh_for_tool_0 = unit(&[0.32, 0.48, 0.07, 0.95]);
        assert_eq!(nearest(&fresh_for_tool_0, &tools), 1, "the plain embedding picks the wrong tool");
        let params = AdapterParams { batch: 16, steps: 200, learning_rate: 0.02, ..AdapterParams::default() };
        let adapter = QueryAdapter::learn(&queries, &used, &tools, params).expect("learns");
        let adapted = adapter.apply(&fresh_for_tool_0).expect("same length");
        assert!((switchyard_models::cosine(&adapted, &adapted) - 1.0).abs() < 1e-4, "unit length");
        assert_eq!(nearest(&adapted, &tools), 0, "adapted: {adapted:?}");
        let fresh_for_tool_1 = adapter.apply(&unit(&[0.05, 1.0, 0.1, 0.12])).expect("same length");
        assert_eq!(nearest(&fresh_for_tool_1, &tools), 1);
        // The same history trains the same map.
        let again = QueryAdapter::learn(&queries, &used, &tools, params).expect("learns");
        assert_eq!(again.matrix, adapter.matrix);
    }

    #[test]
    fn files_round_trip_and_refuse_damage_and_other_models() {
        let tools = vec![unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0])];
        let queries: Vec<Vec<f32>> = (0..24).map(|i| unit(&[1.0, (i % 3) as f32 * 0.1, 0.5])).collect();
        let used: Vec<usize> = (0..24).map(|i| i % 2).collect();
        let adapter = QueryAdapter::learn(&queries, &used, &tools, AdapterParams::default()).expect("learns");
        let model = ModelDigest::from_bytes([3; 32]);
        let bytes = adapter.to_bytes(&model);
        let read = QueryAdapter::from_bytes(&bytes, &model).expect("reads");
        assert_eq!(read.matrix, adapter.matrix);
        assert_eq!(read.provenance(), Provenance { pairs: 24, tools: 2, strength: 0.01 });
        assert!(matches!(
            QueryAdapter::from_bytes(&bytes, &ModelDigest::from_bytes([4; 32])),
            Err(AdapterError::OtherModel)
        ));
        let mut flipped = bytes.clone();
        flipped[HEADER_BYTES + 5] ^= 1;
        assert!(matches!(QueryAdapter::from_bytes(&flipped, &model), Err(AdapterError::Corrupt("checksum"))));
        assert!(matches!(QueryAdapter::from_bytes(&bytes[..bytes.len() - 1], &model), Err(AdapterError::Corrupt(_))));
        assert!(matches!(QueryAdapter::from_bytes(b"{}", &model), Err(AdapterError::Corrupt(_))));
    }

    #[test]
    fn refuses_too_little_history_and_mismatched_lengths() {
        let tools = vec![unit(&[1.0, 0.0]), unit(&[0.0, 1.0])];
        let one_tool = vec![unit(&[1.0, 0.2]); 40];
        assert!(matches!(
            QueryAdapter::learn(&one_tool, &[0; 40], &tools, AdapterParams::default()),
            Err(AdapterError::TooLittleHistory(40, 1))
        ));
        let few = vec![unit(&[1.0, 0.2]), unit(&[0.1, 1.0])];
        assert!(matches!(
            QueryAdapter::learn(&few, &[0, 1], &tools, AdapterParams::default()),
            Err(AdapterError::TooLittleHistory(2, 2))
        ));
        let mut mixed = vec![unit(&[1.0, 0.2]); 30];
        mixed.push(vec![1.0, 0.0, 0.0]);
        let used: Vec<usize> = (0..31).map(|i| i % 2).collect();
        assert!(matches!(
            QueryAdapter::learn(&mixed, &used, &tools, AdapterParams::default()),
            Err(AdapterError::Dimensions(2, 3))
        ));
        let adapter = QueryAdapter::learn(&mixed[..30], &used[..30], &tools, AdapterParams::default()).expect("learns");
        assert!(adapter.apply(&[1.0, 0.0, 0.0]).is_none(), "a query of another length is refused");
    }
}
