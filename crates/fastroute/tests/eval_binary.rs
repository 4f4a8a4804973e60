//! `switchyard-route-eval` end to end on small files kept in the crate (`tests/data`, sources in
//! `data/README.md`), with the real model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn eval(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard-route-eval"))
        .args(args)
        .env("SWITCHYARD_MODEL_DIR", switchyard_testkit::model_dir())
        .output()
        .expect("run switchyard-route-eval")
}

fn report(args: &[&str]) -> Value {
    let output = eval(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// Accuracy is a number in [0, 1] and equals the matrix's diagonal over its total.
fn check_accuracy(report: &Value, labels: &[&str]) {
    let accuracy = report["accuracy"].as_f64().expect("accuracy is a number");
    assert!((0.0..=1.0).contains(&accuracy));
    let names: Vec<&str> =
        report["confusion"]["labels"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(names, labels);
    let rows = report["confusion"]["rows_expected_columns_predicted"].as_array().unwrap();
    let cell = |r: usize, c: usize| rows[r].as_array().unwrap()[c].as_u64().unwrap();
    let total: u64 =
        (0..labels.len()).flat_map(|r| (0..labels.len()).map(move |c| (r, c))).map(|(r, c)| cell(r, c)).sum();
    let correct: u64 = (0..labels.len()).map(|i| cell(i, i)).sum();
    assert_eq!(report["cases"].as_u64(), Some(total));
    assert!((accuracy - correct as f64 / total as f64).abs() < 1e-9);
    for label in labels {
        for metric in ["precision", "recall"] {
            let value = report["per_route"][label][metric].as_f64().expect("metric");
            assert!((0.0..=1.0).contains(&value));
        }
    }
    for percentile in ["p50", "p99"] {
        assert!(report["latency_ms"][percentile].as_f64().expect("latency") > 0.0);
    }
}

#[test]
fn three_way_cases() {
    let report = report(&[data("data/three-way.eval.jsonl").to_str().unwrap()]);
    check_accuracy(&report, &["direct", "mcp_agent", "multiagent"]);
    assert_eq!(report["cases"].as_u64(), Some(105));
}

#[test]
fn needs_tools_cases_with_exclusion_and_folds() {
    let sample = data("tests/data/needs-tools.sample.jsonl");
    let excluded = report(&["--exclude-cases-from-exemplars", sample.to_str().unwrap()]);
    check_accuracy(&excluded, &["direct", "tools"]);
    assert_eq!(excluded["cases"].as_u64(), Some(24));
    let folded = report(&["--folds", "3", sample.to_str().unwrap()]);
    check_accuracy(&folded, &["direct", "tools"]);
    assert_eq!(folded["folds"]["accuracy_per_fold"].as_array().map(Vec::len), Some(3));
}

#[test]
fn help_and_mistakes() {
    let help = eval(&["--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("usage: switchyard-route-eval"));

    let dir = std::env::temp_dir().join(format!("route-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"message\": \"hi\", \"route\": \"direct\"}\n{\"message\": \"x\", \"route\": \"tools\"}\n")
        .unwrap();
    let output = eval(&[bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("line 2") && !stderr.contains("panicked"), "{stderr}");

    let output = eval(&["--nope"]);
    assert_eq!(output.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}
