//! What one usage-history pair costs in memory: the bytes the gateway keeps for it in the
//! loaded history and in the usage prior of the catalog that learned from it, as the types
//! account them (`heap_bytes`; not RSS, so the figures are the same on every machine and
//! leave out the allocator's own overhead). Per pair is the slope between two history sizes,
//! so fixed costs (the tools, the centroids) cancel out. The prior reads the history's int8
//! embeddings in place, so it holds none of its own. The same pairs as the history kept them
//! before it was compacted (a `Vec<UsagePair>`, f32 embeddings, and a second f32 copy in the
//! prior) are accounted beside them. Run with `--no-capture` to see the figures.

use rmcp::model::Tool;
use switchyard_mcp_gateway::{
    catalog::{Catalog, CatalogTool, EmbeddingCache, History},
    domain::UsagePair,
};

const DIMENSIONS: usize = 384;
const TOOLS: usize = 12;

/// A deterministic stream of numbers in [0, 1).
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32) / ((1u64 << 24) as f32)
    }

    fn unit_vector(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIMENSIONS).map(|_| self.next() - 0.5).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }
}

fn tools() -> Vec<CatalogTool> {
    (0..TOOLS)
        .map(|i| {
            let name = format!("server__tool_{i}");
            let mut tool = Tool::new(
                name.clone(),
                format!("Tool number {i}: looks things up about topic {i}"),
                serde_json::Map::new(),
            );
            tool.name = name.clone().into();
            CatalogTool { name, server: "server".to_owned(), upstream_name: format!("tool_{i}"), tool }
        })
        .collect()
}

/// Past requests the way people write them: a dozen words from a few hundred, a number now
/// and then, each sent to one of the tools; with a MiniLM-sized embedding.
fn pairs(count: usize, stream: &mut Stream) -> Vec<UsagePair> {
    const WORDS: [&str; 24] = [
        "weather",
        "flight",
        "paris",
        "recipe",
        "stock",
        "price",
        "news",
        "today",
        "tomorrow",
        "find",
        "book",
        "cheap",
        "hotel",
        "translate",
        "german",
        "email",
        "calendar",
        "meeting",
        "invoice",
        "report",
        "summary",
        "search",
        "music",
        "podcast",
    ];
    (0..count)
        .map(|i| {
            let words: Vec<String> = (0..12)
                .map(|_| {
                    let word = WORDS[(stream.next() * WORDS.len() as f32) as usize % WORDS.len()];
                    format!("{word}{}", (stream.next() * 16.0) as usize)
                })
                .collect();
            UsagePair {
                context: format!("{} {i}", words.join(" ")),
                tool: format!("server__tool_{}", (stream.next() * TOOLS as f32) as usize % TOOLS),
                embedding: Some(stream.unit_vector()),
            }
        })
        .collect()
}

/// Bytes kept for `count` pairs: as the history and the prior keep them, and as they were
/// kept before (the pairs as the store returns them, and the prior's f32 copy of each
/// embedding).
#[derive(Debug, Clone, Copy)]
struct Footprint {
    history: usize,
    prior: usize,
    history_before: usize,
    prior_embeddings_before: usize,
    /// What the prior holds per pair for the history's embeddings it reads.
    prior_embeddings: usize,
}

fn footprint(count: usize) -> Footprint {
    let mut stream = Stream(7);
    let cache = EmbeddingCache::default();
    let tools = tools();
    for document in Catalog::documents(&tools) {
        cache.insert(&document, stream.unit_vector());
    }
    let pairs = pairs(count, &mut stream);
    let history_before = pairs.capacity() * std::mem::size_of::<UsagePair>()
        + pairs
            .iter()
            .map(|p| {
                p.context.capacity()
                    + p.tool.capacity()
                    + p.embedding.as_ref().map_or(0, |e| e.capacity() * std::mem::size_of::<f32>())
            })
            .sum::<usize>();
    let prior_embeddings_before = count * (std::mem::size_of::<Vec<f32>>() + DIMENSIONS * std::mem::size_of::<f32>());
    let history = History::from_pairs(pairs);
    assert_eq!(history.len(), count);
    let catalog = Catalog::from_tools(tools, &cache, &history, true, None);
    assert!(catalog.embedded && catalog.adapted, "the prior and its adapter are learned: {catalog:?}");
    assert_eq!(catalog.learned_pairs, count);
    Footprint {
        history: history.heap_bytes(),
        prior: catalog.history_bytes,
        history_before,
        prior_embeddings_before,
        // Each pair's row in the history (u32) and its length as the query adapter maps it (f32).
        prior_embeddings: count * (std::mem::size_of::<u32>() + std::mem::size_of::<f32>()),
    }
}

#[test]
fn a_history_pair_costs_a_quarter_of_its_f32_embedding_and_its_text() {
    const SMALL: usize = 500;
    const LARGE: usize = 1_500;
    let small = footprint(SMALL);
    let large = footprint(LARGE);
    let per_pair = |f: fn(&Footprint) -> usize| (f(&large) as f64 - f(&small) as f64) / (LARGE - SMALL) as f64;
    let history = per_pair(|f| f.history);
    let prior = per_pair(|f| f.prior);
    let history_before = per_pair(|f| f.history_before);
    let prior_before = prior - per_pair(|f| f.prior_embeddings) + per_pair(|f| f.prior_embeddings_before);
    eprintln!(
        "bytes per history pair ({DIMENSIONS} dimensions), now / before: history {history:.0} / \
         {history_before:.0}, usage prior {prior:.0} / {prior_before:.0}, both {:.0} / {:.0}",
        history + prior,
        history_before + prior_before
    );
    // The contexts here are about 90 characters; the embedding was 1,536 bytes of each.
    assert!(history < 600.0, "history: {history:.0} bytes a pair");
    assert!(history * 3.0 < history_before, "history: {history:.0} against {history_before:.0}");
    assert!(prior < prior_before - 1_000.0, "prior: {prior:.0} against {prior_before:.0}");
    // The embedding once, int8, in the history (388 bytes); the rest is text and word index.
    assert!(history + prior < 1_300.0, "both: {:.0} bytes a pair", history + prior);
}
