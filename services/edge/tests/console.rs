//! The console in a real headless Chromium (Debian's, driven by playwright-core from
//! `scripts/install-tools.sh`): a streamed turn through the real edge, router and sessions,
//! then the routing analytics charted. The screenshots land in the test output
//! (`<target>/test-output/edge-console/`); the test fails if the browser or its driver is
//! missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::PathBuf, process::Command};

use common::{Options, Stack};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

fn output_dir() -> PathBuf {
    let target =
        option_env!("CARGO_TARGET_DIR").map_or_else(|| switchyard_testkit::root().join("target"), PathBuf::from);
    target.join("test-output").join("edge-console")
}

#[tokio::test]
async fn a_streamed_turn_and_the_charts_render_in_chromium() {
    let llm = ScriptedLlm::start(|_| {
        Reply::text("Hello! I can route your questions to the right expert, call tools, or convene a panel.")
            .usage(20, 18)
            .chunk_size(8)
    })
    .await;
    let stack = Stack::start(llm, Options::default()).await;
    let out = output_dir();
    std::fs::create_dir_all(&out).unwrap();
    for name in ["console-turn.png", "console-charts.png"] {
        let _ = std::fs::remove_file(out.join(name));
    }
    let check = switchyard_testkit::root().join(".tools/bin/edge-console-check");
    assert!(check.exists(), "{} is missing: run scripts/install-tools.sh", check.display());
    let url = format!("{}/", stack.edge.url());
    let result = tokio::task::spawn_blocking(move || Command::new(check).arg(url).arg(&out).output())
        .await
        .unwrap()
        .expect("the console check runs");
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "console check failed:\n{}\n{}", stdout, String::from_utf8_lossy(&result.stderr));
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).expect("a JSON summary");
    assert_eq!(summary["route"], "direct", "{summary}");
    assert_eq!(summary["role"], "general-assistant", "{summary}");
    assert!(summary["answer_chars"].as_u64().unwrap() > 40, "{summary}");
    assert!(summary["stats_total"].as_u64().unwrap() >= 1, "{summary}");
    for name in ["console-turn.png", "console-charts.png"] {
        let png = std::fs::read(output_dir().join(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "{name} is a real screenshot ({} bytes)", png.len());
    }
    // The page really streamed from the edge: the router answered one turn.
    assert!(!stack.llm.requests().is_empty());
}
