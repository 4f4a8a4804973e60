//! `switchyard-tool-eval` on a small fixture whose figures can be worked out by hand. Needs the
//! model from `scripts/fetch-models.sh` (the test fails without it).

use std::{fs, path::Path, process::Command};

fn write(dir: &Path, name: &str, lines: &[&str]) -> String {
    let path = dir.join(name);
    fs::write(&path, lines.join("\n")).expect("write fixture");
    path.display().to_string()
}

/// The tools file both tests rank against.
fn three_tools(dir: &Path) -> String {
    write(
        dir,
        "tools.jsonl",
        &[
            r#"{"name": "WeatherNow", "description": "Current weather and forecasts for any city."}"#,
            r#"{"name": "FlightFinder", "description": "Search and compare airline tickets."}"#,
            r#"{"name": "RecipeBox", "description": "Cooking recipes by ingredient."}"#,
        ],
    )
}

/// A report without the times it measured (they differ from run to run; figures must not).
fn without_timings(mut report: serde_json::Value) -> serde_json::Value {
    for (_, method) in report["methods"].as_object_mut().expect("methods").iter_mut() {
        let figures = method.as_object_mut().expect("a method's figures");
        assert!(figures.remove("training_seconds").is_none_or(|t| t.as_f64().is_some_and(|t| t >= 0.0)));
        assert!(figures.remove("ranking_ms_per_query").is_none_or(|t| t.as_f64().is_some_and(|t| t >= 0.0)));
    }
    report
}

#[test]
fn prints_recall_and_mrr_per_method_as_json() {
    let dir = std::env::temp_dir().join(format!("tool-eval-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let tools = three_tools(&dir);
    // The second query names no word of its tool's text: only history can find it.
    let queries = write(
        &dir,
        "queries.jsonl",
        &[
            r#"{"query": "Will it rain in Paris tomorrow? weather please", "tool": "WeatherNow"}"#,
            r#"{"query": "cheapest way to get to Rome by plane", "tool": "FlightFinder"}"#,
            r#"{"query": "no such tool here", "tool": "Missing"}"#,
        ],
    );
    let history = write(&dir, "history.jsonl", &[r#"{"query": "get to Lisbon by plane", "tool": "FlightFinder"}"#]);

    let output = Command::new(env!("CARGO_BIN_EXE_switchyard-tool-eval"))
        .args([&tools, &queries, &history])
        .output()
        .expect("run");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!((report["tools"].as_u64(), report["queries"].as_u64()), (Some(3), Some(2)));
    assert_eq!(report["queries_with_unknown_tool"], 1);
    let bm25 = &report["methods"]["bm25"];
    assert_eq!(bm25["recall@1"], 0.5, "only the weather query is found from tool text: {report}");
    for method in ["embedding", "hybrid", "hybrid+usage_prior"] {
        assert!(report["methods"][method]["recall@5"].is_f64(), "{method} measured: {report}");
    }
    assert_eq!(report["methods"]["embedding"]["recall@1"], 1.0, "MiniLM finds both by meaning: {report}");
    let prior = &report["methods"]["bm25+usage_prior"];
    assert_eq!(
        (prior["recall@1"].as_f64(), prior["mrr"].as_f64()),
        (Some(1.0), Some(1.0)),
        "history finds the flight: {report}"
    );

    // With a cache the second run reads every embedding from the file and reports the same.
    let cache = dir.join("embeddings.bin");
    let cached = || {
        let output = Command::new(env!("CARGO_BIN_EXE_switchyard-tool-eval"))
            .args(["--embedding-cache", &cache.display().to_string(), &tools, &queries, &history])
            .output()
            .expect("run");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("json")
    };
    let (first, second) = (cached(), cached());
    assert!(cache.is_file(), "the cache file is written");
    let report = without_timings(report);
    assert_eq!(without_timings(first), report, "a cache changes no figure");
    assert_eq!(without_timings(second), report, "a cache changes no figure");

    let usage = Command::new(env!("CARGO_BIN_EXE_switchyard-tool-eval")).arg(&tools).output().expect("run");
    assert!(!usage.status.success() && String::from_utf8_lossy(&usage.stderr).contains("usage:"));
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn counts_the_queries_history_made_worse() {
    let dir = std::env::temp_dir().join(format!("tool-eval-loss-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let tools = three_tools(&dir);
    let queries = write(
        &dir,
        "queries.jsonl",
        &[
            r#"{"query": "Will it rain in Paris tomorrow? weather please", "tool": "WeatherNow"}"#,
            r#"{"query": "a recipe with eggs and cooking tips", "tool": "RecipeBox"}"#,
        ],
    );
    // A mislabelled past request, almost the weather query word for word, led to the flight
    // tool: with history the weather query falls from 1st to 2nd. The recipe query's nearest
    // past request led to its own tool, so it stays first. (Every tool has history here, so
    // no tool gets the stand-in share that never-used tools get.)
    let history = write(
        &dir,
        "history.jsonl",
        &[
            r#"{"query": "Will it rain in Paris tomorrow? weather", "tool": "FlightFinder"}"#,
            r#"{"query": "is it sunny in Madrid", "tool": "WeatherNow"}"#,
            r#"{"query": "dinner ideas with pasta", "tool": "RecipeBox"}"#,
        ],
    );
    let (code, stdout, stderr) = run_eval(&[&tools, &queries, &history]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["methods"]["hybrid"]["recall@1"], 1.0, "cold start finds both: {report}");
    let moved = &report["methods"]["hybrid+usage_prior"]["against_cold_start"];
    assert_eq!(
        (moved["worse"].as_u64(), moved["unchanged"].as_u64(), moved["better"].as_u64()),
        (Some(1), Some(1), Some(0)),
        "{report}"
    );
    assert_eq!(
        (moved["fell_out_of_top1"].as_u64(), moved["fell_out_of_top5"].as_u64()),
        (Some(1), Some(0)),
        "{report}"
    );
    assert_eq!((moved["mean_rank_loss"].as_f64(), moved["worst_rank_loss"].as_u64()), (Some(1.0), Some(1)), "{report}");
    assert!(report["methods"]["hybrid"].get("against_cold_start").is_none(), "cold start is the baseline");
    fs::remove_dir_all(&dir).ok();
}

/// Runs the binary with `args`, with a backtrace requested, so one would show if it panicked.
fn run_eval(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard-tool-eval"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn help_prints_the_usage_and_exits_0() {
    for flag in ["--help", "-h"] {
        let (code, stdout, stderr) = run_eval(&[flag]);
        assert_eq!(code, Some(0), "{flag}: {stderr}");
        assert!(stdout.contains("usage: switchyard-tool-eval") && stdout.contains("--embedding-cache"), "{stdout}");
        assert!(stderr.is_empty(), "{flag} writes nothing to stderr: {stderr}");
    }
}

#[test]
fn a_bad_flag_prints_the_usage_and_exits_2_without_a_backtrace() {
    let (code, stdout, stderr) = run_eval(&["--no-such-flag", "tools.jsonl", "queries.jsonl"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("unknown option `--no-such-flag`") && stderr.contains("usage:"), "{stderr}");
    assert!(!stderr.contains("backtrace") && !stderr.contains("panicked"), "{stderr}");

    let (code, _, stderr) = run_eval(&["tools.jsonl"]);
    assert_eq!(code, Some(2), "one file is a usage mistake too: {stderr}");
}

#[test]
fn a_missing_file_is_an_error_without_a_backtrace() {
    let (code, _, stderr) = run_eval(&["/nonexistent/tools.jsonl", "/nonexistent/queries.jsonl"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.starts_with("switchyard-tool-eval: error: reading /nonexistent/tools.jsonl"), "{stderr}");
    assert!(!stderr.contains("Stack backtrace") && !stderr.contains("panicked"), "{stderr}");
}

/// `--save-base-adapter` writes the adapter learned from HISTORY, `--base-adapter PATH` reads
/// it back as the cold-start ranking's adapter, `shipped` is the gateway's own, and
/// `--base-adapter history` with too little history is an error that says so.
#[test]
fn base_adapters_are_saved_read_and_chosen() {
    let dir = std::env::temp_dir().join(format!("tool-eval-adapter-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let tools = three_tools(&dir);
    let queries = write(&dir, "queries.jsonl", &[r#"{"query": "is it sunny in Oslo", "tool": "WeatherNow"}"#]);
    let asked = [
        ("WeatherNow", ["rain in Paris tomorrow", "how warm is it in Rome", "snow forecast for Denver"]),
        ("FlightFinder", ["cheap flights to Tokyo", "plane tickets to Lisbon", "fly to Berlin on friday"]),
        ("RecipeBox", ["what can I cook with eggs", "pasta recipe with tomatoes", "dinner ideas with rice"]),
    ];
    let lines: Vec<String> = (0..3)
        .flat_map(|round| {
            asked.iter().flat_map(move |(tool, texts)| {
                texts.iter().map(move |text| format!(r#"{{"query": "{text} ({round})", "tool": "{tool}"}}"#))
            })
        })
        .collect();
    let history = write(&dir, "history.jsonl", &lines.iter().map(String::as_str).collect::<Vec<_>>());
    let saved = dir.join("base.bin").display().to_string();

    let (code, stdout, stderr) = run_eval(&["--save-base-adapter", &saved, &tools, &queries, &history]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["base_adapter"]["learned_from"], "history", "{report}");
    assert_eq!(fs::metadata(&saved).expect("written").len(), 60 + 4 * 384 * 384 + 32, "header, matrix, digest");

    let (code, stdout, stderr) = run_eval(&["--base-adapter", &saved, &tools, &queries]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["base_adapter"], saved.as_str());
    assert_eq!(report["methods"]["hybrid"]["recall@1"], 1.0, "{report}");

    let (code, stdout, stderr) = run_eval(&["--base-adapter", "shipped", &tools, &queries]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(r#""base_adapter": "shipped""#), "{stdout}");

    let one = write(&dir, "one.jsonl", &[r#"{"query": "fly to Rome", "tool": "FlightFinder"}"#]);
    let (code, _, stderr) = run_eval(&["--base-adapter", "history", &tools, &queries, &one]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("too little to learn from"), "{stderr}");
    // Chosen by default, too little history only means no adapter.
    let (code, stdout, stderr) = run_eval(&[&tools, &queries, &one]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("too little to learn from"), "{stdout}");
    fs::remove_dir_all(&dir).ok();
}
