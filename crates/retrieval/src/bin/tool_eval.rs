//! `switchyard-tool-eval TOOLS QUERIES [HISTORY]`: measures tool retrieval on MetaTool-shaped
//! JSON-lines files — TOOLS: `{"name", "description"}`; QUERIES and HISTORY:
//! `{"query", "tool"}`. Prints recall@1/5/10 and MRR per method as one JSON object, so it runs
//! unchanged on any split. Methods: `bm25` (tool text alone), `embedding` (MiniLM cosine),
//! `hybrid` (both) and, with HISTORY, `hybrid+usage_prior` (the past queries nearest in meaning
//! vote for the tools they used) and `bm25+usage_prior` (no model, neighbours by shared words).
//! The model folder is `SWITCHYARD_MODEL_DIR`, else `models/all-MiniLM-L6-v2` of the
//! workspace (`scripts/fetch-models.sh`).

use std::{collections::HashMap, fs, path::Path};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::json;
use switchyard_models::Embedder;
use switchyard_retrieval::{ToolRanker, ToolText, Weights, tool_document};

#[derive(Deserialize)]
struct ToolLine {
    name: String,
    description: String,
}

#[derive(Deserialize)]
struct QueryLine {
    query: String,
    tool: String,
}

/// Past queries that vote for each new one, and the prior's weight against the tool text;
/// `SWITCHYARD_EVAL_NEIGHBOURS` and `SWITCHYARD_EVAL_PRIOR_WEIGHT` override them for tuning.
const NEIGHBOURS: usize = 10;
const PRIOR_WEIGHT: f32 = 3.0;
/// The embedding signal's weight against BM25: without history it must outweigh BM25 (3×
/// measured best of 1× and 3×); with history, where the prior already carries meaning, 1×
/// (`SWITCHYARD_EVAL_SEMANTIC_WEIGHT` overrides both).
const COLD_START_SEMANTIC_WEIGHT: f32 = 3.0;
const WITH_HISTORY_SEMANTIC_WEIGHT: f32 = 1.0;

fn tuning<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), number + 1)))
        .collect()
}

/// Texts embedded per model call.
const BATCH: usize = 64;

fn embed_all(embedder: &Embedder, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(BATCH) {
        out.extend(embedder.embed(chunk)?);
    }
    Ok(out)
}

fn measure(ranker: &ToolRanker, queries: &[(String, usize)], embeddings: Option<&[Vec<f32>]>) -> serde_json::Value {
    let (mut hits1, mut hits5, mut hits10, mut reciprocal) = (0usize, 0usize, 0usize, 0.0f64);
    for (index, (query, expected)) in queries.iter().enumerate() {
        let embedding = embeddings.map(|e| e[index].as_slice());
        let rank = ranker.rank(query, embedding).iter().position(|tool| tool == expected).map_or(usize::MAX, |p| p + 1);
        hits1 += usize::from(rank <= 1);
        hits5 += usize::from(rank <= 5);
        hits10 += usize::from(rank <= 10);
        if rank != usize::MAX {
            reciprocal += 1.0 / rank as f64;
        }
    }
    let n = queries.len().max(1) as f64;
    let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
    json!({
        "recall@1": round(hits1 as f64 / n),
        "recall@5": round(hits5 as f64 / n),
        "recall@10": round(hits10 as f64 / n),
        "mrr": round(reciprocal / n),
    })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(2..=3).contains(&args.len()) {
        bail!("usage: switchyard-tool-eval TOOLS QUERIES [HISTORY]");
    }
    let tools: Vec<ToolLine> = read_lines(Path::new(&args[0]))?;
    let index_of: HashMap<&str, usize> = tools.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let known = |lines: Vec<QueryLine>| -> (Vec<(String, usize)>, usize) {
        let total = lines.len();
        let kept: Vec<_> =
            lines.into_iter().filter_map(|l| index_of.get(l.tool.as_str()).map(|&i| (l.query, i))).collect();
        let unknown = total - kept.len();
        (kept, unknown)
    };
    let (queries, unknown_tools) = known(read_lines(Path::new(&args[1]))?);
    let texts: Vec<ToolText> = tools
        .iter()
        .map(|t| ToolText { name: t.name.clone(), description: t.description.clone(), parameters: Vec::new() })
        .collect();

    let model_dir = std::env::var("SWITCHYARD_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2"));
    let embedder = Embedder::load(&model_dir)
        .with_context(|| format!("loading the embedding model from {}", model_dir.display()))?;
    let documents: Vec<String> = texts.iter().map(tool_document).collect();
    let tool_embeddings = embed_all(&embedder, &documents.iter().map(String::as_str).collect::<Vec<_>>())?;
    let query_embeddings = embed_all(&embedder, &queries.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>())?;
    let weights = |lexical, semantic, usage_prior| Weights { lexical, semantic, usage_prior };

    let mut methods = serde_json::Map::new();
    let bm25 = ToolRanker::new(&texts, weights(1.0, 0.0, 0.0));
    methods.insert("bm25".into(), measure(&bm25, &queries, None));
    let embedding = ToolRanker::new(&texts, weights(0.0, 1.0, 0.0)).with_tool_embeddings(tool_embeddings.clone());
    methods.insert("embedding".into(), measure(&embedding, &queries, Some(&query_embeddings)));
    let cold_start_semantic = tuning("SWITCHYARD_EVAL_SEMANTIC_WEIGHT", COLD_START_SEMANTIC_WEIGHT);
    let hybrid =
        ToolRanker::new(&texts, weights(1.0, cold_start_semantic, 0.0)).with_tool_embeddings(tool_embeddings.clone());
    methods.insert("hybrid".into(), measure(&hybrid, &queries, Some(&query_embeddings)));
    if let Some(history_path) = args.get(2) {
        let (history, _) = known(read_lines(Path::new(history_path))?);
        let neighbours = tuning("SWITCHYARD_EVAL_NEIGHBOURS", NEIGHBOURS);
        let prior_weight = tuning("SWITCHYARD_EVAL_PRIOR_WEIGHT", PRIOR_WEIGHT);
        let lexical_prior =
            ToolRanker::new(&texts, weights(1.0, 0.0, prior_weight)).with_history(&history, None, neighbours);
        methods.insert("bm25+usage_prior".into(), measure(&lexical_prior, &queries, None));
        let history_embeddings = embed_all(&embedder, &history.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>())?;
        let with_history_semantic = tuning("SWITCHYARD_EVAL_SEMANTIC_WEIGHT", WITH_HISTORY_SEMANTIC_WEIGHT);
        let full = ToolRanker::new(&texts, weights(1.0, with_history_semantic, prior_weight))
            .with_tool_embeddings(tool_embeddings)
            .with_history(&history, Some(history_embeddings), neighbours);
        methods.insert("hybrid+usage_prior".into(), measure(&full, &queries, Some(&query_embeddings)));
    }
    let report = json!({
        "tools": tools.len(),
        "queries": queries.len(),
        "queries_with_unknown_tool": unknown_tools,
        "methods": methods,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
