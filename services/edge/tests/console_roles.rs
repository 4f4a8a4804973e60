//! The console's "Tool access by role" view in a real headless Chromium (the driver of
//! `console.rs`): the real edge, sessions (its built-in roles) and the real MCP gateway with
//! server-everything and a servers file of policies. Each role shows the tools it may use under
//! those policies, and those it may not. The screenshot lands in the test output
//! (`<target>/test-output/edge-console/console-roles.png`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::PathBuf, process::Command};

use common::{Options, Stack};
use serde_json::Value;
use switchyard_testkit::llm::{Reply, ScriptedLlm};

const POLICIES: &str = r#"
[[policies]]
name = "finance-no-env"
roles = ["finance-expert"]
deny_tools = ["everything__get-env"]

[[policies]]
name = "legal-sums-only"
roles = ["legal-expert"]
allow_tools = ["everything__get-sum", "everything__echo"]

[[policies]]
name = "everyone"
pin = ["everything__echo"]
"#;

fn output_dir() -> PathBuf {
    let target =
        option_env!("CARGO_TARGET_DIR").map_or_else(|| switchyard_testkit::root().join("target"), PathBuf::from);
    target.join("test-output").join("edge-console")
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect()
}

#[tokio::test]
async fn the_role_view_shows_what_each_role_may_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("servers.toml");
    std::fs::write(&path, POLICIES).unwrap();
    let options = Options {
        gateway: true,
        configure_gateway: Box::new(move |config| config.config_file = Some(path)),
        ..Options::default()
    };
    let stack = Stack::start(ScriptedLlm::start(|_| Reply::text("unused")).await, options).await;
    let out = output_dir();
    std::fs::create_dir_all(&out).unwrap();
    let _ = std::fs::remove_file(out.join("console-roles.png"));
    let check = switchyard_testkit::root().join(".tools/bin/edge-console-check");
    assert!(check.exists(), "{} is missing: run scripts/install-tools.sh", check.display());
    let url = format!("{}/", stack.edge.url());
    let shots = out.clone();
    let result = tokio::task::spawn_blocking(move || Command::new(check).arg(url).arg(&shots).arg("roles").output())
        .await
        .unwrap()
        .expect("the console check runs");
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "console check failed:\n{}\n{}", stdout, String::from_utf8_lossy(&result.stderr));
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).expect("a JSON summary");
    let roles = &summary["roles"];

    let finance = &roles["finance-expert"];
    assert_eq!(finance["visible"], true, "{summary}");
    assert_eq!(strings(&finance["denied"]), ["everything__get-env"], "{summary}");
    assert!(strings(&finance["allowed"]).contains(&"everything__get-sum"), "{summary}");
    assert!(!strings(&finance["allowed"]).contains(&"everything__get-env"), "{summary}");
    assert_eq!(strings(&finance["pinned"]), ["everything__echo"], "{summary}");

    let legal = &roles["legal-expert"];
    let mut allowed = strings(&legal["allowed"]);
    allowed.sort_unstable();
    assert_eq!(allowed, ["everything__echo", "everything__get-sum"], "{summary}");
    assert!(strings(&legal["denied"]).contains(&"everything__get-env"), "{summary}");

    // A role no policy restricts may use every tool.
    let general = &roles["general-assistant"];
    assert!(strings(&general["denied"]).is_empty(), "{summary}");
    assert!(strings(&general["allowed"]).contains(&"everything__get-env"), "{summary}");

    let png = std::fs::read(out.join("console-roles.png")).expect("the role view's screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "a real screenshot ({} bytes)", png.len());
}
