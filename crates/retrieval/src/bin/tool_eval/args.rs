//! The command line of `switchyard-tool-eval`: `--help`, the embedding cache and the two or
//! three data files. Parsing never exits or panics; `main` decides what a mistake prints and
//! which code it exits with.

use std::path::PathBuf;

pub const USAGE: &str = "usage: switchyard-tool-eval [--embedding-cache PATH] TOOLS QUERIES [HISTORY]";

pub const HELP: &str = "\
Measures tool retrieval on MetaTool-shaped JSON-lines files and prints recall@1/5/10 and MRR
per method as one JSON object.

usage: switchyard-tool-eval [--embedding-cache PATH] TOOLS QUERIES [HISTORY]

arguments:
  TOOLS     one {\"name\", \"description\"} object per line
  QUERIES   one {\"query\", \"tool\"} object per line, the queries measured
  HISTORY   past {\"query\", \"tool\"} pairs; adds the usage-prior methods

options:
  --embedding-cache PATH  keep embeddings in PATH between runs (or SWITCHYARD_EMBEDDING_CACHE)
  -h, --help              print this help

environment:
  SWITCHYARD_MODEL_DIR    the MiniLM folder (default: models/all-MiniLM-L6-v2 of the workspace)
  SWITCHYARD_EVAL_*       tuning overrides (see the eval's source)
";

/// A run's inputs.
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub tools: PathBuf,
    pub queries: PathBuf,
    pub history: Option<PathBuf>,
    pub embedding_cache: Option<PathBuf>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Run(Args),
}

/// Parses the arguments after the program name; `cache_from_env` is the default cache file.
/// The error is one line naming the mistake.
pub fn parse(args: impl IntoIterator<Item = String>, cache_from_env: Option<PathBuf>) -> Result<Command, String> {
    let mut positional = Vec::new();
    let mut embedding_cache = cache_from_env;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--embedding-cache" => {
                let path = args.next().ok_or("--embedding-cache needs a PATH")?;
                embedding_cache = Some(PathBuf::from(path));
            }
            // Everything after `--` is a file, even a name starting with `-`.
            "--" => positional.extend(args.by_ref()),
            _ => {
                if let Some(path) = arg.strip_prefix("--embedding-cache=") {
                    embedding_cache = Some(PathBuf::from(path));
                } else if arg.starts_with('-') && arg != "-" {
                    return Err(format!("unknown option `{arg}`"));
                } else {
                    positional.push(arg);
                }
            }
        }
    }
    let mut files = positional.into_iter().map(PathBuf::from);
    match (files.next(), files.next(), files.next(), files.next()) {
        (Some(tools), Some(queries), history, None) => {
            Ok(Command::Run(Args { tools, queries, history, embedding_cache }))
        }
        (_, _, _, Some(extra)) => Err(format!("unexpected argument `{}`", extra.display())),
        _ => Err("expected the TOOLS and QUERIES files".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Command, String> {
        parse(words.iter().map(|w| (*w).to_owned()), None)
    }

    #[test]
    fn files_and_cache() {
        let run = parse_words(&["--embedding-cache=c.bin", "t", "q", "h"]).unwrap();
        let expected = Args {
            tools: "t".into(),
            queries: "q".into(),
            history: Some("h".into()),
            embedding_cache: Some("c.bin".into()),
        };
        assert_eq!(run, Command::Run(expected));
        let Ok(Command::Run(args)) = parse(["t".to_owned(), "q".to_owned()], Some("env.bin".into())) else {
            panic!("two files are a run");
        };
        assert_eq!((args.history, args.embedding_cache), (None, Some("env.bin".into())));
    }

    #[test]
    fn help_wins_and_mistakes_are_named() {
        assert_eq!(parse_words(&["t", "--help"]), Ok(Command::Help));
        assert_eq!(parse_words(&["-h"]), Ok(Command::Help));
        assert_eq!(parse_words(&["--bogus", "t", "q"]), Err("unknown option `--bogus`".to_owned()));
        assert_eq!(parse_words(&["t"]), Err("expected the TOOLS and QUERIES files".to_owned()));
        assert_eq!(parse_words(&["a", "b", "c", "d"]), Err("unexpected argument `d`".to_owned()));
        assert_eq!(parse_words(&["t", "q", "--embedding-cache"]), Err("--embedding-cache needs a PATH".to_owned()));
        assert!(matches!(parse_words(&["--", "-t", "q"]), Ok(Command::Run(Args { .. }))));
    }
}
