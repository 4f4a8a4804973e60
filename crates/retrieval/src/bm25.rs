//! Okapi BM25 over a fixed set of documents, with an inverted index so a query only touches
//! the documents that share a term with it.

use std::collections::HashMap;

/// BM25 parameters: term-frequency saturation and length normalization.
#[derive(Debug, Clone, Copy)]
pub struct Bm25Params {
    pub k1: f32,
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75 }
    }
}

pub struct Bm25Index {
    params: Bm25Params,
    /// term → (document, term frequency)
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<f32>,
    average_length: f32,
}

impl Bm25Index {
    /// Indexes documents given as their terms.
    pub fn build(documents: &[Vec<String>], params: Bm25Params) -> Self {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        for (index, terms) in documents.iter().enumerate() {
            let mut counts: HashMap<&str, u32> = HashMap::new();
            for term in terms {
                *counts.entry(term).or_default() += 1;
            }
            for (term, count) in counts {
                postings.entry(term.to_owned()).or_default().push((index as u32, count));
            }
        }
        let lengths: Vec<f32> = documents.iter().map(|d| d.len() as f32).collect();
        let average_length = if lengths.is_empty() { 0.0 } else { lengths.iter().sum::<f32>() / lengths.len() as f32 };
        Self { params, postings, lengths, average_length }
    }

    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Bytes held on the heap (the terms, their postings and the table's slots).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(String, Vec<(u32, u32)>)>() + 1;
        self.postings.capacity() * slot
            + self
                .postings
                .iter()
                .map(|(term, postings)| term.capacity() + postings.capacity() * std::mem::size_of::<(u32, u32)>())
                .sum::<usize>()
            + self.lengths.capacity() * std::mem::size_of::<f32>()
    }

    /// The BM25 score of every document for `query` (0 for documents sharing no term).
    pub fn scores(&self, query: &[String]) -> Vec<f32> {
        let mut scores = vec![0.0f32; self.lengths.len()];
        let documents = self.lengths.len() as f32;
        let mut seen: Vec<&str> = Vec::with_capacity(query.len());
        for term in query {
            // A term repeated in the query counts once: queries are short and repetition is noise.
            if seen.contains(&term.as_str()) {
                continue;
            }
            seen.push(term);
            let Some(postings) = self.postings.get(term) else { continue };
            let frequency = postings.len() as f32;
            let idf = ((documents - frequency + 0.5) / (frequency + 0.5) + 1.0).ln();
            for &(document, count) in postings {
                let tf = count as f32;
                let length = self.lengths[document as usize];
                let norm = 1.0 - self.params.b + self.params.b * length / self.average_length.max(1.0);
                scores[document as usize] += idf * tf * (self.params.k1 + 1.0) / (tf + self.params.k1 * norm);
            }
        }
        scores
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::terms;

    #[test]
    fn the_document_sharing_rare_terms_ranks_first() {
        let docs: Vec<Vec<String>> =
            ["weather forecast for any city", "convert currency and exchange rates", "search academic papers"]
                .iter()
                .map(|d| terms(d))
                .collect();
        let index = Bm25Index::build(&docs, Bm25Params::default());
        let scores = index.scores(&terms("what is the exchange rate of euros"));
        assert!(scores[1] > scores[0] && scores[1] > scores[2], "{scores:?}");
        assert_eq!(index.scores(&terms("zzz")), vec![0.0; 3]);
    }
}
