//! Where the repository is and the programs and models it installs beside the code
//! (scripts/install-tools.sh fills `.tools/bin`, scripts/fetch-models.sh fills `models/`).
//! Anything missing is a failure that says how to get it, never a skip.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The workspace root, found from the running test's `CARGO_MANIFEST_DIR`, falling back to the
/// compile-time one: a target dir shared between checkouts reuses binaries compiled in another
/// checkout, whose baked-in path may be gone.
pub fn root() -> PathBuf {
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .ancestors()
        .find(|dir| is_workspace_root(dir))
        .unwrap_or_else(|| panic!("no workspace Cargo.toml above {}", manifest_dir.display()))
        .to_path_buf()
}

fn is_workspace_root(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|text| text.lines().any(|line| line.trim() == "[workspace]"))
}

/// A launcher from `.tools/bin` (an MCP server, a client, the conformance suite).
pub fn peer_tool(name: &str) -> String {
    let path = root().join(".tools/bin").join(name);
    assert!(path.exists(), "{} is missing: run scripts/install-tools.sh", path.display());
    path.display().to_string()
}

/// `grpcurl`: `$GRPCURL`, else `.tools/bin/grpcurl`, else the one on PATH.
pub fn grpcurl() -> PathBuf {
    if let Some(path) = std::env::var_os("GRPCURL") {
        return PathBuf::from(path);
    }
    let installed = root().join(".tools/bin/grpcurl");
    if installed.exists() {
        return installed;
    }
    assert!(
        Command::new("grpcurl").arg("-version").output().is_ok(),
        "grpcurl not found: run scripts/install-tools.sh (or set GRPCURL) — tests never skip"
    );
    PathBuf::from("grpcurl")
}

/// The all-MiniLM-L6-v2 folder: `$SWITCHYARD_MODEL_DIR`, else `models/all-MiniLM-L6-v2`.
pub fn model_dir() -> PathBuf {
    std::env::var_os("SWITCHYARD_MODEL_DIR").map_or_else(|| root().join("models/all-MiniLM-L6-v2"), PathBuf::from)
}
