//! The aggregated tool catalog: every server's tools under gateway names, indexed for ranking
//! (BM25 over name, description and parameter names; MiniLM embeddings; the usage prior).
//!
//! A catalog is immutable and swapped whole when a server's tools change or the usage history
//! is reloaded, so requests rank against a consistent snapshot without locks. Embeddings are
//! cached by tool text: a change on one server embeds only the tools that changed.

use std::{collections::HashMap, sync::Arc};

use rmcp::model::Tool;
/// Tool embeddings by document text, kept across catalog rebuilds.
pub use switchyard_models::EmbeddingCache;
use switchyard_retrieval::{
    QuantizedRows, QueryAdapter, SharedRows, ToolRanker, ToolText, Weights, prior::PriorParams, tool_document,
};

use crate::{domain::UsagePair, naming, upstream::Upstreams};

/// One tool as the gateway shows it.
#[derive(Debug, Clone)]
pub struct CatalogTool {
    /// The gateway name (`<server>__<tool>`).
    pub name: String,
    pub server: String,
    /// The name on its server.
    pub upstream_name: String,
    /// The server's definition, renamed to the gateway name.
    pub tool: Tool,
}

/// One tool's place for a context: its score and what each signal contributed to it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Ranked {
    pub index: usize,
    pub score: f32,
    pub bm25: f32,
    pub embedding: f32,
    pub usage_prior: f32,
}

/// The usage history the catalog learns from, kept compact because a gateway keeps up to
/// `MCP_GATEWAY_HISTORY_LIMIT` pairs for as long as it runs: each context once, exactly sized;
/// each tool name once for all its pairs; the context embeddings quantised to int8 in one
/// block ([`QuantizedRows`]: 388 bytes for MiniLM's 384 dimensions, against 1,536 as f32),
/// shared with the catalogs built from it: their usage prior and query adapter read the rows
/// in place ([`SharedRows`]).
#[derive(Debug, Default, PartialEq)]
pub struct History {
    contexts: Vec<Box<str>>,
    /// Each pair's tool, as an index into `tool_names`.
    tools: Vec<u32>,
    tool_names: Vec<Box<str>>,
    /// Each pair's row in `embeddings`, when its context had one.
    rows: Vec<Option<u32>>,
    embeddings: Arc<QuantizedRows>,
}

/// A [`History`] built pair by pair as the store streams them (newest first): each embedding
/// is quantised as it arrives, so the history's f32 vectors are never all held at once.
#[derive(Debug, Default)]
pub struct HistoryBuilder {
    /// Pairs expected, reserved for once the first embedding gives their length.
    expected: usize,
    contexts: Vec<Box<str>>,
    tools: Vec<u32>,
    tool_names: Vec<Box<str>>,
    interned: HashMap<Box<str>, u32>,
    rows: Vec<Option<u32>>,
    embeddings: QuantizedRows,
}

impl HistoryBuilder {
    /// Room for `pairs` pairs.
    pub fn with_capacity(pairs: usize) -> Self {
        Self {
            expected: pairs,
            contexts: Vec::with_capacity(pairs),
            tools: Vec::with_capacity(pairs),
            rows: Vec::with_capacity(pairs),
            ..Self::default()
        }
    }

    /// Adds the next pair: its context, its tool's gateway name and its context's embedding.
    pub fn push(&mut self, context: String, tool: &str, embedding: Option<&[f32]>) {
        let tool = match self.interned.get(tool) {
            Some(index) => *index,
            None => {
                let index = u32::try_from(self.tool_names.len()).unwrap_or(u32::MAX);
                self.tool_names.push(tool.into());
                self.interned.insert(tool.into(), index);
                index
            }
        };
        // A vector of another length than the first (a model changed under a running
        // history) is left out like a missing one.
        let row = embedding.filter(|e| self.embeddings.push(e)).map(|_| self.embeddings.len() - 1);
        if row == Some(0) {
            self.embeddings.reserve(self.expected.saturating_sub(self.contexts.len() + 1));
        }
        self.contexts.push(context.into_boxed_str());
        self.tools.push(tool);
        self.rows.push(row.and_then(|row| u32::try_from(row).ok()));
    }

    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// The history, exactly sized (a vector grown by pushing keeps up to twice what it needs;
    /// one reserved for the limit may be mostly empty).
    pub fn finish(self) -> History {
        let Self { mut contexts, mut tools, mut tool_names, mut rows, mut embeddings, .. } = self;
        contexts.shrink_to_fit();
        tools.shrink_to_fit();
        tool_names.shrink_to_fit();
        rows.shrink_to_fit();
        embeddings.shrink_to_fit();
        History { contexts, tools, tool_names, rows, embeddings: Arc::new(embeddings) }
    }
}

impl History {
    /// Takes the pairs the store returned (newest first), freeing each as it is kept.
    pub fn from_pairs(pairs: Vec<UsagePair>) -> Self {
        let mut history = HistoryBuilder::with_capacity(pairs.len());
        for pair in pairs {
            history.push(pair.context, &pair.tool, pair.embedding.as_deref());
        }
        history.finish()
    }

    /// The newest pair's context and tool.
    pub fn newest(&self) -> Option<(&str, &str)> {
        self.pairs().next().map(|(context, tool, _)| (context, tool))
    }

    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// Each pair: its context, its tool's gateway name and the context's embedding row.
    fn pairs(&self) -> impl Iterator<Item = (&str, &str, Option<u32>)> {
        self.contexts.iter().zip(&self.tools).zip(&self.rows).map(|((context, tool), row)| {
            let tool = self.tool_names.get(*tool as usize).map_or("", |name| name.as_ref());
            (context.as_ref(), tool, *row)
        })
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.contexts.capacity() * std::mem::size_of::<Box<str>>()
            + self.contexts.iter().map(|c| c.len()).sum::<usize>()
            + self.tools.capacity() * std::mem::size_of::<u32>()
            + self.tool_names.capacity() * std::mem::size_of::<Box<str>>()
            + self.tool_names.iter().map(|t| t.len()).sum::<usize>()
            + self.rows.capacity() * std::mem::size_of::<Option<u32>>()
            + self.embeddings.heap_bytes()
    }
}

pub struct Catalog {
    tools: Vec<Arc<CatalogTool>>,
    by_name: HashMap<String, usize>,
    ranker: ToolRanker,
    /// Every tool has its embedding (the semantic signal is on).
    pub embedded: bool,
    /// History pairs that taught the prior (their tool still exists).
    pub learned_pairs: usize,
    /// A query adapter was learned from them (enough history with embeddings).
    pub adapted: bool,
    /// Words and word pairs the usage prior's word classifier learned (0: none, too little
    /// history).
    pub word_features: usize,
    /// Bytes the usage prior holds for the history it learned from (not the embeddings it
    /// reads from the history).
    pub history_bytes: usize,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.tools.len())
            .field("embedded", &self.embedded)
            .field("learned_pairs", &self.learned_pairs)
            .field("adapted", &self.adapted)
            .field("word_features", &self.word_features)
            .field("history_bytes", &self.history_bytes)
            .finish_non_exhaustive()
    }
}

/// What ranking looks at for one tool.
pub fn tool_text(tool: &Tool, upstream_name: &str) -> ToolText {
    let mut description = tool.description.as_deref().unwrap_or_default().to_owned();
    if let Some(title) = &tool.title {
        description = format!("{title}. {description}");
    }
    let parameters = tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|props| props.keys().cloned().collect())
        .unwrap_or_default();
    ToolText { name: upstream_name.to_owned(), description, parameters }
}

impl Catalog {
    pub fn empty() -> Self {
        Self::from_tools(Vec::new(), &EmbeddingCache::default(), &History::default(), false, None)
    }

    /// Collects every server's tools (in configuration order) under gateway names.
    pub fn collect(upstreams: &Upstreams, prefix: bool) -> Vec<CatalogTool> {
        let listings: Vec<_> = upstreams.servers().iter().map(|s| (s.name().to_owned(), s.listing())).collect();
        let pairs: Vec<(&str, &str)> = listings
            .iter()
            .flat_map(|(server, listing)| listing.tools.iter().map(move |tool| (server.as_str(), tool.name.as_ref())))
            .collect();
        let (names, notes) = naming::assign(&pairs, prefix);
        for note in notes {
            tracing::warn!("tool name collision: {note}");
        }
        let mut names = names.into_iter();
        let mut tools = Vec::with_capacity(pairs.len());
        for (server, listing) in &listings {
            for tool in &listing.tools {
                let Some(name) = names.next() else { break };
                let mut renamed = tool.clone();
                renamed.name = name.clone().into();
                tools.push(CatalogTool {
                    name,
                    server: server.clone(),
                    upstream_name: tool.name.to_string(),
                    tool: renamed,
                });
            }
        }
        tools
    }

    /// The documents to embed for these tools.
    pub fn documents(tools: &[CatalogTool]) -> Vec<String> {
        tools.iter().map(|t| tool_document(&tool_text(&t.tool, &t.upstream_name))).collect()
    }

    /// Indexes tools; uses embeddings from `cache` when every tool has one (contexts then
    /// mapped by `base_adapter`, if any, before the semantic signal), and learns the usage
    /// prior and its query adapter from `history`.
    pub fn from_tools(
        tools: Vec<CatalogTool>,
        cache: &EmbeddingCache,
        history: &History,
        semantic: bool,
        base_adapter: Option<Arc<QueryAdapter>>,
    ) -> Self {
        let texts: Vec<ToolText> = tools.iter().map(|t| tool_text(&t.tool, &t.upstream_name)).collect();
        let by_name: HashMap<String, usize> = tools.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        // The contexts as the history keeps them, and each pair's embedding row: the prior
        // and its adapter read both in place.
        let (pairs, rows): (Vec<(&str, usize)>, Vec<Option<u32>>) =
            history.pairs().filter_map(|(context, tool, row)| by_name.get(tool).map(|i| ((context, *i), row))).unzip();
        // The weights measured best on MetaTool (BENCHMARKS.md): meaning over shared words
        // at cold start; with usage, what similar contexts led to outweighs descriptions.
        let weights = if pairs.is_empty() { Weights::cold_start() } else { Weights::with_history() };
        let mut ranker = ToolRanker::new(&texts, weights);
        let embeddings: Option<Vec<Vec<f32>>> = if semantic {
            texts.iter().map(|t| cache.get(&tool_document(t)).map(|v| v.as_ref().clone())).collect()
        } else {
            None
        };
        let embedded = embeddings.is_some() && !tools.is_empty();
        if let Some(embeddings) = embeddings {
            ranker = ranker.with_tool_embeddings(embeddings);
            if let Some(adapter) = base_adapter {
                ranker = ranker.with_base_adapter(adapter);
            }
        }
        let learned_pairs = pairs.len();
        if !pairs.is_empty() {
            // Only when every pair has its embedding.
            let history_embeddings = rows
                .into_iter()
                .collect::<Option<Vec<u32>>>()
                .filter(|_| embedded)
                .and_then(|picks| SharedRows::picked(Arc::clone(&history.embeddings), picks));
            ranker = ranker.with_history_params(&pairs, history_embeddings, PriorParams::default());
        }
        let adapted = ranker.adapter().is_some();
        let history_bytes = ranker.history_heap_bytes();
        let word_features = ranker.words().map_or(0, |words| words.features_len());
        Self {
            tools: tools.into_iter().map(Arc::new).collect(),
            by_name,
            ranker,
            embedded,
            learned_pairs,
            adapted,
            word_features,
            history_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn tools(&self) -> &[Arc<CatalogTool>] {
        &self.tools
    }

    pub fn tool(&self, index: usize) -> &Arc<CatalogTool> {
        &self.tools[index]
    }

    pub fn get(&self, name: &str) -> Option<&Arc<CatalogTool>> {
        self.by_name.get(name).map(|i| &self.tools[*i])
    }

    /// The best `limit` tools for a context, best first. The embedding is used only when the
    /// catalog is embedded.
    pub fn rank(&self, context: &str, embedding: Option<&[f32]>, limit: usize) -> Vec<Ranked> {
        self.rank_among(context, embedding, limit, None)
    }

    /// [`Self::rank`] among the tools `among` marks (by index; all when None): the others are
    /// never picked, so `limit` tools of those are returned when there are that many.
    pub fn rank_among(
        &self,
        context: &str,
        embedding: Option<&[f32]>,
        limit: usize,
        among: Option<&[bool]>,
    ) -> Vec<Ranked> {
        let embedding = embedding.filter(|_| self.embedded);
        let signals = self.ranker.signals(context, embedding);
        let part = |signal: &Option<Vec<f32>>, i: usize| signal.as_ref().map_or(0.0, |values| values[i]);
        let scores: Vec<f32> = (0..self.tools.len())
            .map(|i| part(&signals.lexical, i) + part(&signals.semantic, i) + part(&signals.usage_prior, i))
            .collect();
        let mut order: Vec<usize> = match among {
            None => (0..scores.len()).collect(),
            Some(among) => (0..scores.len()).filter(|&i| among.get(i).copied().unwrap_or(false)).collect(),
        };
        let keep = limit.min(order.len());
        if keep == 0 {
            return Vec::new();
        }
        let better = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
        // Partial selection first: 1,000 tools, a handful kept.
        if keep < order.len() {
            order.select_nth_unstable_by(keep - 1, better);
            order.truncate(keep);
        }
        order.sort_by(better);
        order
            .into_iter()
            .map(|index| Ranked {
                index,
                score: scores[index],
                bm25: part(&signals.lexical, index),
                embedding: part(&signals.semantic, index),
                usage_prior: part(&signals.usage_prior, index),
            })
            .collect()
    }
}
