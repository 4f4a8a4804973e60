//! Embeddings kept as int8, one scale per vector, all in one allocation: what the usage prior
//! holds for each past request (tens of thousands of them), a quarter of the bytes of f32
//! vectors and without one heap block per vector. A cosine against an f32 query loses
//! nothing that moves a ranking (each component is within half a step of 1/127 of the
//! vector's largest; the tool-retrieval eval is unchanged, BENCHMARKS.md).
//!
//! The gateway's loaded history owns its rows once; the usage prior and the query adapter
//! read them through [`SharedRows`] rather than keeping copies of their own.

use std::sync::Arc;

/// Vectors of one length, each as `round(x / scale)` in i8 with `scale = max |x| / 127`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizedRows {
    dimensions: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
}

impl QuantizedRows {
    /// No vectors yet, room for `rows` of `dimensions`.
    pub fn with_capacity(dimensions: usize, rows: usize) -> Self {
        Self { dimensions, values: Vec::with_capacity(dimensions * rows), scales: Vec::with_capacity(rows) }
    }

    /// Every vector of `rows`; None when their lengths differ.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a [f32]>) -> Option<Self> {
        let mut rows = rows.into_iter().peekable();
        let dimensions = rows.peek().map_or(0, |row| row.len());
        let mut quantized = Self::with_capacity(dimensions, rows.size_hint().0);
        for row in rows {
            if !quantized.push(row) {
                return None;
            }
        }
        Some(quantized)
    }

    /// Appends `row`; false (nothing added) when its length is not the others'.
    pub fn push(&mut self, row: &[f32]) -> bool {
        if self.scales.is_empty() && self.values.is_empty() {
            self.dimensions = row.len();
        }
        if row.len() != self.dimensions {
            return false;
        }
        let largest = row.iter().fold(0.0f32, |m, x| if x.is_finite() { m.max(x.abs()) } else { m });
        let scale = if largest > 0.0 { largest / 127.0 } else { 0.0 };
        let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        self.values.extend(row.iter().map(|x| {
            let x = if x.is_finite() { *x } else { 0.0 };
            // In range by construction; the clamp only guards rounding at ±127.
            (x * inverse).round().clamp(-127.0, 127.0) as i8
        }));
        self.scales.push(scale);
        true
    }

    /// Room for `rows` more vectors of the length of those pushed (none before the first).
    pub fn reserve(&mut self, rows: usize) {
        self.values.reserve(self.dimensions * rows);
        self.scales.reserve(rows);
    }

    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn values(&self, index: usize) -> &[i8] {
        &self.values[index * self.dimensions..(index + 1) * self.dimensions]
    }

    /// Vector `index` back as f32 (within half a quantisation step of what was pushed).
    pub fn row(&self, index: usize) -> Vec<f32> {
        let mut row = Vec::with_capacity(self.dimensions);
        self.extend_row(index, &mut row);
        row
    }

    /// Appends vector `index` back as f32 to `out` (a buffer reused row after row).
    pub fn extend_row(&self, index: usize, out: &mut Vec<f32>) {
        let scale = self.scales[index];
        out.extend(self.values(index).iter().map(|q| f32::from(*q) * scale));
    }

    /// The dot product of vector `index` with `query` (its cosine, for unit vectors); 0 when
    /// the lengths differ.
    pub fn dot(&self, index: usize, query: &[f32]) -> f32 {
        if query.len() != self.dimensions {
            return 0.0;
        }
        const LANES: usize = 8;
        let values = self.values(index);
        let (q_chunks, v_chunks) = (query.chunks_exact(LANES), values.chunks_exact(LANES));
        let tail: f32 = q_chunks.remainder().iter().zip(v_chunks.remainder()).map(|(x, v)| x * f32::from(*v)).sum();
        let mut sums = [0.0f32; LANES];
        for (x, v) in q_chunks.zip(v_chunks) {
            for ((sum, x), v) in sums.iter_mut().zip(x).zip(v) {
                *sum += x * f32::from(*v);
            }
        }
        (sums.iter().sum::<f32>() + tail) * self.scales[index]
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.values.capacity() + self.scales.capacity() * std::mem::size_of::<f32>()
    }

    /// Drops spare capacity (a collection built by pushing keeps up to twice what it needs).
    pub fn shrink_to_fit(&mut self) {
        self.values.shrink_to_fit();
        self.scales.shrink_to_fit();
    }
}

/// Past requests' embeddings read one at a time, in f32: what the query adapter learns from
/// without an f32 copy of the history beside the int8 one.
pub trait EmbeddingRows {
    fn rows(&self) -> usize;
    fn row_len(&self, index: usize) -> usize;
    /// Appends entry `index` to `out`.
    fn extend_row(&self, index: usize, out: &mut Vec<f32>);
}

impl EmbeddingRows for [Vec<f32>] {
    fn rows(&self) -> usize {
        self.len()
    }

    fn row_len(&self, index: usize) -> usize {
        self[index].len()
    }

    fn extend_row(&self, index: usize, out: &mut Vec<f32>) {
        out.extend_from_slice(&self[index]);
    }
}

/// What the slice reads (so `&Vec<Vec<f32>>` is taken as it is).
impl EmbeddingRows for Vec<Vec<f32>> {
    fn rows(&self) -> usize {
        self.as_slice().rows()
    }

    fn row_len(&self, index: usize) -> usize {
        self.as_slice().row_len(index)
    }

    fn extend_row(&self, index: usize, out: &mut Vec<f32>) {
        self.as_slice().extend_row(index, out);
    }
}

/// Entries of a [`QuantizedRows`] that someone else holds, picked and ordered for one reader:
/// the gateway's usage prior and query adapter read its loaded history's rows this way (for
/// the pairs whose tool still exists) instead of each keeping a copy — at the default history
/// limit a copy is 7.8 MB as int8, 31 MB as f32, and a catalog rebuild held both.
#[derive(Debug, Clone)]
pub struct SharedRows {
    rows: Arc<QuantizedRows>,
    /// Each entry's row; None: entry `i` is row `i`.
    picks: Option<Vec<u32>>,
    /// The rows were quantised for this reader alone ([`Self::quantize`]), so its heap
    /// counts them.
    own: bool,
}

impl SharedRows {
    /// Every row, in order.
    pub fn all(rows: Arc<QuantizedRows>) -> Self {
        Self { rows, picks: None, own: false }
    }

    /// The rows `picks` names, in that order; None when one is out of range.
    pub fn picked(rows: Arc<QuantizedRows>, picks: Vec<u32>) -> Option<Self> {
        picks.iter().all(|row| (*row as usize) < rows.len()).then_some(Self { rows, picks: Some(picks), own: false })
    }

    /// Vectors quantised for this reader alone (what a caller with f32 embeddings passes);
    /// None when their lengths differ.
    pub fn quantize(rows: &[Vec<f32>]) -> Option<Self> {
        let mut quantized = QuantizedRows::from_rows(rows.iter().map(Vec::as_slice))?;
        quantized.shrink_to_fit();
        Some(Self { rows: Arc::new(quantized), picks: None, own: true })
    }

    pub fn len(&self) -> usize {
        self.picks.as_ref().map_or(self.rows.len(), Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dimensions(&self) -> usize {
        self.rows.dimensions()
    }

    fn row_of(&self, entry: usize) -> usize {
        self.picks.as_ref().map_or(entry, |picks| picks[entry] as usize)
    }

    /// [`QuantizedRows::dot`] of entry `entry`.
    pub fn dot(&self, entry: usize, query: &[f32]) -> f32 {
        self.rows.dot(self.row_of(entry), query)
    }

    /// Bytes held on the heap for this reader: the picks, and the rows when they are its own
    /// (shared rows are their owner's).
    pub fn heap_bytes(&self) -> usize {
        self.picks.as_ref().map_or(0, |picks| picks.capacity() * std::mem::size_of::<u32>())
            + if self.own { self.rows.heap_bytes() } else { 0 }
    }
}

impl EmbeddingRows for SharedRows {
    fn rows(&self) -> usize {
        self.len()
    }

    fn row_len(&self, _index: usize) -> usize {
        self.dimensions()
    }

    fn extend_row(&self, index: usize, out: &mut Vec<f32>) {
        self.rows.extend_row(self.row_of(index), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    #[test]
    fn cosines_stay_within_a_small_error_of_f32() {
        let mut state = 1u64;
        let mut next = || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let rows: Vec<Vec<f32>> = (0..50).map(|_| unit(&(0..384).map(|_| next()).collect::<Vec<_>>())).collect();
        let query = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
        let quantized = QuantizedRows::from_rows(rows.iter().map(Vec::as_slice)).expect("one length");
        assert_eq!((quantized.len(), quantized.dimensions()), (50, 384));
        for (i, row) in rows.iter().enumerate() {
            let exact: f32 = row.iter().zip(&query).map(|(a, b)| a * b).sum();
            assert!((quantized.dot(i, &query) - exact).abs() < 2e-3, "row {i}");
            let back = quantized.row(i);
            let self_cosine: f32 = back.iter().zip(row).map(|(a, b)| a * b).sum();
            assert!(self_cosine > 0.999, "row {i}: {self_cosine}");
        }
        assert_eq!(quantized.heap_bytes(), 50 * 384 + 50 * 4, "one byte a component, one scale a vector");
    }

    #[test]
    fn odd_input_is_refused_or_kept_harmless() {
        let mut rows = QuantizedRows::default();
        assert!(rows.push(&[0.0, 0.0, 0.0]), "a zero vector");
        assert!(rows.push(&[f32::NAN, 1.0, f32::INFINITY]), "non-finite components count as 0");
        assert!(!rows.push(&[1.0]), "another length");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.dot(0, &[1.0, 1.0, 1.0]), 0.0);
        assert_eq!(rows.row(1), vec![0.0, 1.0, 0.0]);
        assert_eq!(rows.dot(1, &[1.0]), 0.0, "a query of another length");
        assert!(QuantizedRows::from_rows([&[1.0f32, 2.0][..], &[1.0][..]]).is_none());
        assert!(QuantizedRows::from_rows(std::iter::empty::<&[f32]>()).is_some_and(|r| r.is_empty()));
    }

    #[test]
    fn shared_rows_read_the_picked_rows_in_place() {
        let rows = Arc::new(QuantizedRows::from_rows([&[1.0f32, 0.0][..], &[0.0, 1.0][..]]).expect("one length"));
        let picked = SharedRows::picked(Arc::clone(&rows), vec![1, 1, 0]).expect("in range");
        assert_eq!((picked.len(), picked.dimensions()), (3, 2));
        assert_eq!((picked.dot(0, &[0.0, 1.0]), picked.dot(2, &[0.0, 1.0])), (1.0, 0.0));
        let mut out = Vec::new();
        (0..3).for_each(|entry| picked.extend_row(entry, &mut out));
        assert_eq!(out, [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]);
        assert_eq!(picked.heap_bytes(), 3 * 4, "the picks only: the rows are the owner's");
        assert_eq!(SharedRows::all(Arc::clone(&rows)).len(), 2);
        assert!(SharedRows::picked(rows, vec![2]).is_none(), "a row out of range");
        let own = SharedRows::quantize(&[vec![1.0, 0.0]]).expect("one length");
        assert_eq!(own.heap_bytes(), 2 + 4, "rows quantised for the reader are its own");
    }
}
