//! The evaluation: reads TOOLS (`{"name", "description"}` per line), QUERIES and HISTORY
//! (`{"query", "tool"}`), and prints recall@1/5/10 and MRR per method as one JSON object, so it
//! runs unchanged on any split. Methods: `bm25` (tool text alone), `embedding` (MiniLM cosine),
//! `hybrid` (both) and, with HISTORY, `hybrid+usage_prior` (the past queries nearest in meaning
//! vote for the tools they used) and `bm25+usage_prior` (no model, neighbours by shared words).
//! The model folder is `SWITCHYARD_MODEL_DIR`, else `models/all-MiniLM-L6-v2` of the
//! workspace (`scripts/fetch-models.sh`).
//!
//! `--embedding-cache PATH` (or `SWITCHYARD_EMBEDDING_CACHE`) keeps the embeddings in a file
//! between runs, keyed by the model's files, the single-text kernels and the exact text, so a
//! tuning sweep runs the model once.
//!
//! Embedded as the gateway does: tool texts in batches (candle's BERT, f32), each query alone
//! (the single-text encoder, on the kernels `SWITCHYARD_ENCODER` / `SWITCHYARD_SIMD` choose;
//! the report names them as `query_kernels`).

use std::{collections::HashMap, fs, path::Path, sync::Arc};

use anyhow::Context;
use serde::Deserialize;
use serde_json::json;
use switchyard_models::{Embedder, cache_file::ModelDigest};
use switchyard_retrieval::{
    AdapterParams, Fusion, PriorParams, QueryAdapter, SharedRows, ToolRanker, ToolText, Votes, Weights, WordClassifier,
    WordParams, tool_document,
};

use crate::{
    args::{Args, BaseAdapter},
    cache::{self, EmbeddingCache},
    compare,
};

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

/// Past queries that vote for each new one in `bm25+usage_prior` (neighbours by shared words,
/// voting their BM25 score; 10 measured best of 5–40), and that prior's weight. The
/// `hybrid` methods use the library's defaults ([`Weights::cold_start`],
/// [`Weights::with_history`], [`PriorParams::default`]).
const LEXICAL_NEIGHBOURS: usize = 10;
const LEXICAL_PRIOR_WEIGHT: f32 = 3.0;

/// Tuning overrides, read from the environment: `SWITCHYARD_EVAL_` + `SEMANTIC_WEIGHT` (both
/// hybrids), `HISTORY_SEMANTIC_WEIGHT` (with history only), `HISTORY_LEXICAL_WEIGHT`, `PRIOR_WEIGHT`, `NEIGHBOURS`, `TEMPERATURE`,
/// `CONFIDENCE_FLOOR`, `CONFIDENCE_FULL`, `CENTROID_WEIGHT`, `UNSEEN_SHARE`,
/// `LEXICAL_NEIGHBOURS`, `VOTES`
/// (`sum`, `best`) and `FUSION` (`minmax`, `zscore`, `rrf`).
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

/// The true tool's rank (1 is the best) for each query.
fn ranks(ranker: &ToolRanker, queries: &[(String, usize)], embeddings: Option<&[Vec<f32>]>) -> Vec<usize> {
    queries
        .iter()
        .enumerate()
        .map(|(index, (query, expected))| {
            let embedding = embeddings.map(|e| e[index].as_slice());
            ranker.rank(query, embedding).iter().position(|tool| tool == expected).map_or(usize::MAX, |p| p + 1)
        })
        .collect()
}

/// Writes every tool's score for each query (little-endian f32, queries × tools, in file
/// order) for experiments that fuse another signal with the ranker's.
fn dump_scores(
    path: &Path,
    ranker: &ToolRanker,
    queries: &[(String, usize)],
    embeddings: &[Vec<f32>],
) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    for ((query, _), embedding) in queries.iter().zip(embeddings) {
        for score in ranker.scores(query, Some(embedding)) {
            bytes.extend_from_slice(&score.to_le_bytes());
        }
    }
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A method's figures; with a baseline, also how it moved each query against it.
fn report(ranks: &[usize], baseline: Option<&[usize]>) -> serde_json::Value {
    let mut figures = compare::summary(ranks);
    if let Some(baseline) = baseline {
        figures["against_cold_start"] = compare::against(baseline, ranks);
    }
    figures
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let tools: Vec<ToolLine> = read_lines(&args.tools)?;
    let index_of: HashMap<&str, usize> = tools.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let known = |lines: Vec<QueryLine>| -> (Vec<(String, usize)>, usize) {
        let total = lines.len();
        let kept: Vec<_> =
            lines.into_iter().filter_map(|l| index_of.get(l.tool.as_str()).map(|&i| (l.query, i))).collect();
        let unknown = total - kept.len();
        (kept, unknown)
    };
    let (queries, unknown_tools) = known(read_lines(&args.queries)?);
    let texts: Vec<ToolText> = tools
        .iter()
        .map(|t| ToolText { name: t.name.clone(), description: t.description.clone(), parameters: Vec::new() })
        .collect();

    let model_dir = std::env::var("SWITCHYARD_MODEL_DIR").map(std::path::PathBuf::from).unwrap_or_else(|_| {
        Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()))
            .join("../../models/all-MiniLM-L6-v2")
    });
    let embedder = Embedder::load(&model_dir)
        .with_context(|| format!("loading the embedding model from {}", model_dir.display()))?;
    let mut cache =
        EmbeddingCache::open(args.embedding_cache.clone(), cache::fingerprint(&model_dir, &embedder.kernels().name())?);
    let documents: Vec<String> = texts.iter().map(tool_document).collect();
    let tool_embeddings = cache.embed(&embedder, &documents.iter().map(String::as_str).collect::<Vec<_>>())?;
    let query_embeddings =
        cache.embed_alone(&embedder, &queries.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>())?;
    let weights = |lexical, semantic, usage_prior| Weights { lexical, semantic, usage_prior };
    let history = match &args.history {
        Some(path) => {
            let (history, _) = known(read_lines(path)?);
            let embeddings =
                cache.embed_alone(&embedder, &history.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>())?;
            Some((history, embeddings))
        }
        None => None,
    };
    let learn_base = || -> anyhow::Result<(QueryAdapter, f64)> {
        let (history, embeddings) = history.as_ref().context("the base adapter learns from HISTORY")?;
        let used: Vec<usize> = history.iter().map(|(_, tool)| *tool).collect();
        let params = AdapterParams {
            strength: tuning("SWITCHYARD_EVAL_BASE_STRENGTH", AdapterParams::base().strength),
            ..AdapterParams::base()
        };
        let started = std::time::Instant::now();
        let adapter = QueryAdapter::learn(embeddings, &used, &tool_embeddings, params)?;
        Ok((adapter, started.elapsed().as_secs_f64()))
    };
    let model = || ModelDigest::of_dir(&model_dir).with_context(|| format!("digesting {}", model_dir.display()));
    let source = args.base_adapter.clone().unwrap_or(if history.is_some() {
        BaseAdapter::History
    } else {
        BaseAdapter::Shipped
    });
    let (base, base_note) = match &source {
        BaseAdapter::None => (None, json!("none")),
        BaseAdapter::Shipped => {
            let adapter = QueryAdapter::shipped(&model()?).context("the shipped query adapter")?;
            (Some(adapter), json!("shipped"))
        }
        BaseAdapter::File(path) => {
            let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let adapter = QueryAdapter::from_bytes(&bytes, &model()?).with_context(|| format!("{}", path.display()))?;
            (Some(adapter), json!(path.display().to_string()))
        }
        BaseAdapter::History => match learn_base() {
            Ok((adapter, seconds)) => (Some(adapter), json!({"learned_from": "history", "training_seconds": seconds})),
            // Chosen by default, a history too small to learn from means no adapter.
            Err(err) if args.base_adapter.is_none() => (None, json!(format!("none ({err:#})"))),
            Err(err) => return Err(err),
        },
    };
    if let Some(path) = &args.save_base_adapter {
        let adapter = match (&source, &base) {
            (BaseAdapter::History, Some(adapter)) => adapter.clone(),
            _ => learn_base()?.0,
        };
        fs::write(path, adapter.to_bytes(&model()?)).with_context(|| format!("writing {}", path.display()))?;
    }

    let base = base.map(Arc::new);

    let mut methods = serde_json::Map::new();
    let bm25 = ToolRanker::new(&texts, weights(1.0, 0.0, 0.0));
    methods.insert("bm25".into(), report(&ranks(&bm25, &queries, None), None));
    let embedding = ToolRanker::new(&texts, weights(0.0, 1.0, 0.0)).with_tool_embeddings(tool_embeddings.clone());
    methods.insert("embedding".into(), report(&ranks(&embedding, &queries, Some(&query_embeddings)), None));
    let fusion = match std::env::var("SWITCHYARD_EVAL_FUSION").as_deref() {
        Ok("zscore") => Fusion::ZScore,
        Ok("rrf") => Fusion::Rrf,
        _ => Fusion::MinMax,
    };
    let cold = Weights::cold_start();
    let cold = Weights { semantic: tuning("SWITCHYARD_EVAL_SEMANTIC_WEIGHT", cold.semantic), ..cold };
    let plain = ToolRanker::new(&texts, cold).with_fusion(fusion).with_tool_embeddings(tool_embeddings.clone());
    methods.insert("hybrid_without_adapter".into(), report(&ranks(&plain, &queries, Some(&query_embeddings)), None));
    // The gateway's cold start: the base adapter maps each query before the semantic signal.
    let with_base = |ranker: ToolRanker| match &base {
        Some(adapter) => ranker.with_base_adapter(Arc::clone(adapter)),
        None => ranker,
    };
    let hybrid = with_base(plain);
    let cold_ranks = ranks(&hybrid, &queries, Some(&query_embeddings));
    methods.insert("hybrid".into(), report(&cold_ranks, None));
    let cold_ranks = Some(cold_ranks.as_slice());
    if let Some((history, history_embeddings)) = &history {
        let lexical_prior = ToolRanker::new(&texts, weights(1.0, 0.0, LEXICAL_PRIOR_WEIGHT)).with_history(
            history,
            None,
            LEXICAL_NEIGHBOURS,
        );
        methods.insert("bm25+usage_prior".into(), report(&ranks(&lexical_prior, &queries, None), cold_ranks));
        let warm = Weights::with_history();
        let warm = Weights {
            lexical: tuning("SWITCHYARD_EVAL_HISTORY_LEXICAL_WEIGHT", warm.lexical),
            semantic: tuning(
                "SWITCHYARD_EVAL_HISTORY_SEMANTIC_WEIGHT",
                tuning("SWITCHYARD_EVAL_SEMANTIC_WEIGHT", warm.semantic),
            ),
            usage_prior: tuning("SWITCHYARD_EVAL_PRIOR_WEIGHT", warm.usage_prior),
        };
        let defaults = PriorParams::default();
        let params = PriorParams {
            neighbours: tuning("SWITCHYARD_EVAL_NEIGHBOURS", defaults.neighbours),
            temperature: tuning("SWITCHYARD_EVAL_TEMPERATURE", defaults.temperature),
            confidence_floor: tuning("SWITCHYARD_EVAL_CONFIDENCE_FLOOR", defaults.confidence_floor),
            confidence_full: tuning("SWITCHYARD_EVAL_CONFIDENCE_FULL", defaults.confidence_full),
            votes: match std::env::var("SWITCHYARD_EVAL_VOTES").as_deref() {
                Ok("best") => Votes::Best,
                Ok("sum") => Votes::Sum,
                _ => defaults.votes,
            },
            centroid_weight: tuning("SWITCHYARD_EVAL_CENTROID_WEIGHT", defaults.centroid_weight),
            unseen_share: tuning("SWITCHYARD_EVAL_UNSEEN_SHARE", defaults.unseen_share),
            lexical_neighbours: tuning("SWITCHYARD_EVAL_LEXICAL_NEIGHBOURS", defaults.lexical_neighbours),
            adapter_weight: tuning("SWITCHYARD_EVAL_ADAPTER_WEIGHT", defaults.adapter_weight),
            adapter: AdapterParams {
                strength: tuning("SWITCHYARD_EVAL_ADAPTER_STRENGTH", defaults.adapter.strength),
                temperature: tuning("SWITCHYARD_EVAL_ADAPTER_TEMPERATURE", defaults.adapter.temperature),
                steps: tuning("SWITCHYARD_EVAL_ADAPTER_STEPS", defaults.adapter.steps),
                batch: tuning("SWITCHYARD_EVAL_ADAPTER_BATCH", defaults.adapter.batch),
                learning_rate: tuning("SWITCHYARD_EVAL_ADAPTER_RATE", defaults.adapter.learning_rate),
                ..defaults.adapter
            },
            adapted_neighbours: tuning("SWITCHYARD_EVAL_ADAPTED_NEIGHBOURS", defaults.adapted_neighbours),
            cold_fallback: tuning("SWITCHYARD_EVAL_COLD_FALLBACK", defaults.cold_fallback),
            word_weight: tuning("SWITCHYARD_EVAL_WORD_WEIGHT", defaults.word_weight),
            word_temperature: tuning("SWITCHYARD_EVAL_WORD_TEMPERATURE", defaults.word_temperature),
            words: WordParams {
                epochs: tuning("SWITCHYARD_EVAL_WORD_EPOCHS", defaults.words.epochs),
                learning_rate: tuning("SWITCHYARD_EVAL_WORD_RATE", defaults.words.learning_rate),
                regularisation: tuning("SWITCHYARD_EVAL_WORD_REGULARISATION", defaults.words.regularisation),
                max_weights: tuning("SWITCHYARD_EVAL_WORD_MAX_WEIGHTS", defaults.words.max_weights),
                ..defaults.words
            },
        };
        // The plain nearest-neighbour vote over the same history: what the fusion must beat.
        let neighbours = ToolRanker::new(&texts, weights(0.0, 0.0, 1.0)).with_history_params(
            history,
            SharedRows::quantize(history_embeddings),
            PriorParams {
                centroid_weight: 0.0,
                unseen_share: 0.0,
                lexical_neighbours: 0.0,
                adapter_weight: 0.0,
                adapted_neighbours: false,
                cold_fallback: false,
                word_weight: 0.0,
                ..params
            },
        );
        let neighbour_ranks = ranks(&neighbours, &queries, Some(&query_embeddings));
        methods.insert("nearest_neighbours".into(), report(&neighbour_ranks, cold_ranks));
        // The word classifier alone: each tool as likely as the words of its past requests.
        let started = std::time::Instant::now();
        match WordClassifier::learn(history, params.words) {
            Some(words) => {
                let seconds = started.elapsed().as_secs_f64();
                let word_ranks: Vec<usize> = queries
                    .iter()
                    .map(|(query, expected)| {
                        let logits = words.logits(&switchyard_retrieval::text::terms(query), texts.len());
                        // No logit (no shared feature, or a tool never used): ranked last.
                        match logits[*expected] {
                            Some(own) => 1 + logits.iter().flatten().filter(|l| **l > own).count(),
                            None => texts.len(),
                        }
                    })
                    .collect();
                let mut figures = report(&word_ranks, cold_ranks);
                figures["training_seconds"] = json!(seconds);
                figures["features"] = json!(words.features_len());
                methods.insert("word_classifier".into(), figures);
            }
            None => eprintln!("no word classifier (too little history)"),
        }
        let unprimed =
            with_base(ToolRanker::new(&texts, warm).with_fusion(fusion).with_tool_embeddings(tool_embeddings));
        let started = std::time::Instant::now();
        // The history's embeddings as the gateway keeps them (int8, its `catalog::History`),
        // read in place by the adapter's training and the prior.
        let full = unprimed.with_history_params(history, SharedRows::quantize(history_embeddings), params);
        // Learning the prior is the usage adapter's training, all but a few milliseconds.
        let seconds = started.elapsed().as_secs_f64();
        // The usage adapter alone: the embedding signal with each query mapped as the history
        // taught (what the prior's adapter part sees).
        match full.adapter() {
            Some(adapter) => {
                let adapted: Vec<Vec<f32>> =
                    query_embeddings.iter().map(|q| adapter.apply(q).unwrap_or_else(|| q.clone())).collect();
                let mut figures = report(&ranks(&embedding, &queries, Some(&adapted)), cold_ranks);
                figures["training_seconds"] = json!(seconds);
                methods.insert("embedding+adapter".into(), figures);
            }
            None => eprintln!("no usage adapter (too little history, or ADAPTER_WEIGHT 0)"),
        }
        if let Ok(path) = std::env::var("SWITCHYARD_EVAL_DUMP_SCORES") {
            dump_scores(Path::new(&path), &full, &queries, &query_embeddings)?;
        }
        let started = std::time::Instant::now();
        let full_ranks = ranks(&full, &queries, Some(&query_embeddings));
        let per_query = started.elapsed().as_secs_f64() * 1e3 / queries.len().max(1) as f64;
        let mut figures = report(&full_ranks, cold_ranks);
        // Ranking alone (the embeddings are cached): what the prior adds to each set_context.
        figures["ranking_ms_per_query"] = json!(per_query);
        figures["training_seconds"] = json!(seconds);
        methods.insert("hybrid+usage_prior".into(), figures);
    }
    let report = json!({
        "tools": tools.len(),
        "queries": queries.len(),
        "queries_with_unknown_tool": unknown_tools,
        "query_kernels": embedder.kernels().name(),
        "base_adapter": base_note,
        "methods": methods,
    });
    cache.save()?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
