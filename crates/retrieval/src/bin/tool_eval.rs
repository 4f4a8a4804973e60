//! `switchyard-tool-eval TOOLS QUERIES [HISTORY]`: measures tool retrieval on MetaTool-shaped
//! JSON-lines files — TOOLS: `{"name", "description"}`; QUERIES and HISTORY:
//! `{"query", "tool"}`. Prints recall@1/5/10 and MRR per method as one JSON object, so it runs
//! unchanged on any split. Methods: `bm25` (tool text alone) and, with HISTORY,
//! `bm25+usage_prior` (past queries like this one vote for the tools they used).

use std::{collections::HashMap, fs, path::Path};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::json;
use switchyard_retrieval::{ToolRanker, ToolText, Weights};

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

fn measure(ranker: &ToolRanker, queries: &[(String, usize)]) -> serde_json::Value {
    let (mut hits1, mut hits5, mut hits10, mut reciprocal) = (0usize, 0usize, 0usize, 0.0f64);
    for (query, expected) in queries {
        let rank = ranker.rank(query).iter().position(|tool| tool == expected).map_or(usize::MAX, |p| p + 1);
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

    let lexical = ToolRanker::new(&texts, Weights { lexical: 1.0, usage_prior: 0.0 });
    let mut methods = serde_json::Map::new();
    methods.insert("bm25".into(), measure(&lexical, &queries));
    if let Some(history_path) = args.get(2) {
        let (history, _) = known(read_lines(Path::new(history_path))?);
        let weights = Weights { lexical: 1.0, usage_prior: tuning("SWITCHYARD_EVAL_PRIOR_WEIGHT", PRIOR_WEIGHT) };
        let hybrid =
            ToolRanker::new(&texts, weights).with_history(&history, tuning("SWITCHYARD_EVAL_NEIGHBOURS", NEIGHBOURS));
        methods.insert("bm25+usage_prior".into(), measure(&hybrid, &queries));
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
