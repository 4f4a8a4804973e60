//! `switchyard-tool-eval TOOLS QUERIES [HISTORY]`: measures tool retrieval on MetaTool-shaped
//! JSON-lines files (see `eval.rs`). Usage mistakes print the usage and exit 2; a failed run
//! prints its error chain and exits 1, never a backtrace.
//!
//! The files come from the public MetaTool benchmark (github.com/HowieHwong/MetaTool, MIT):
//! its 199 tools are in the repository (`services/mcp-gateway/tests/data/`, with source and
//! licence); a dev split of its queries (16,384 `{"query", "tool"}` lines) is kept outside it and
//! split into QUERIES and HISTORY by `scripts/eval-split.py` (BENCHMARKS.md, "Tool retrieval").

mod args;
mod cache;
mod compare;
mod eval;

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let cache_from_env = std::env::var_os("SWITCHYARD_EMBEDDING_CACHE").map(PathBuf::from);
    match args::parse(std::env::args().skip(1), cache_from_env) {
        Ok(args::Command::Help) => {
            print!("{}", args::HELP);
            ExitCode::SUCCESS
        }
        Ok(args::Command::Run(args)) => match eval::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("switchyard-tool-eval: error: {err:#}");
                ExitCode::FAILURE
            }
        },
        Err(mistake) => {
            eprintln!("switchyard-tool-eval: error: {mistake}\n{}\n(--help for more)", args::USAGE);
            ExitCode::from(2)
        }
    }
}
