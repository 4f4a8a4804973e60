//! The command line of `switchyard-tool-eval`: `--help`, the embedding cache, the base query
//! adapter and the two or three data files. Parsing never exits or panics; `main` decides what a mistake prints and
//! which code it exits with.

use std::path::PathBuf;

pub const USAGE: &str = "usage: switchyard-tool-eval [--embedding-cache PATH] [--base-adapter SOURCE] \
[--save-base-adapter PATH] TOOLS QUERIES [HISTORY]";

pub const HELP: &str = "\
Measures tool retrieval on MetaTool-shaped JSON-lines files and prints recall@1/5/10 and MRR
per method as one JSON object.

usage: switchyard-tool-eval [--embedding-cache PATH] [--base-adapter SOURCE]
                            [--save-base-adapter PATH] TOOLS QUERIES [HISTORY]

arguments:
  TOOLS     one {\"name\", \"description\"} object per line
  QUERIES   one {\"query\", \"tool\"} object per line, the queries measured
  HISTORY   past {\"query\", \"tool\"} pairs; adds the usage-prior methods

options:
  --embedding-cache PATH  keep embeddings in PATH between runs (or SWITCHYARD_EMBEDDING_CACHE)
  --base-adapter SOURCE   the query adapter of the cold-start ranking (`hybrid`): `history`
                          (learned from HISTORY, so a split never scores queries the adapter
                          was trained on; the default with HISTORY), `shipped` (the gateway's;
                          the default without), `none`, or an adapter file's PATH
  --save-base-adapter PATH  write the adapter learned from HISTORY to PATH (what the gateway's
                          --base-adapter reads)
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
    /// `None`: `history` when there is a HISTORY file, else `shipped`.
    pub base_adapter: Option<BaseAdapter>,
    pub save_base_adapter: Option<PathBuf>,
}

/// Where the cold-start ranking's query adapter comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseAdapter {
    History,
    Shipped,
    None,
    File(PathBuf),
}

impl BaseAdapter {
    fn parse(source: &str) -> Self {
        match source {
            "history" => Self::History,
            "shipped" => Self::Shipped,
            "none" => Self::None,
            path => Self::File(PathBuf::from(path)),
        }
    }
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
    let mut base_adapter = None;
    let mut save_base_adapter = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--embedding-cache" => {
                let path = args.next().ok_or("--embedding-cache needs a PATH")?;
                embedding_cache = Some(PathBuf::from(path));
            }
            "--base-adapter" => {
                base_adapter = Some(BaseAdapter::parse(&args.next().ok_or("--base-adapter needs a SOURCE")?));
            }
            "--save-base-adapter" => {
                save_base_adapter = Some(PathBuf::from(args.next().ok_or("--save-base-adapter needs a PATH")?));
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
        (Some(_), Some(_), None, None) if save_base_adapter.is_some() => {
            Err("--save-base-adapter learns from HISTORY: give the HISTORY file".to_owned())
        }
        (Some(_), Some(_), None, None) if base_adapter == Some(BaseAdapter::History) => {
            Err("--base-adapter history needs the HISTORY file".to_owned())
        }
        (Some(tools), Some(queries), history, None) => {
            Ok(Command::Run(Args { tools, queries, history, embedding_cache, base_adapter, save_base_adapter }))
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
            base_adapter: None,
            save_base_adapter: None,
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
        assert_eq!(parse_words(&["t", "q", "--base-adapter"]), Err("--base-adapter needs a SOURCE".to_owned()));
        assert_eq!(
            parse_words(&["--save-base-adapter", "a.bin", "t", "q"]),
            Err("--save-base-adapter learns from HISTORY: give the HISTORY file".to_owned())
        );
        assert_eq!(
            parse_words(&["--base-adapter", "history", "t", "q"]),
            Err("--base-adapter history needs the HISTORY file".to_owned())
        );
    }

    #[test]
    fn base_adapter_sources() {
        for (word, expected) in [
            ("history", BaseAdapter::History),
            ("shipped", BaseAdapter::Shipped),
            ("none", BaseAdapter::None),
            ("mine.bin", BaseAdapter::File("mine.bin".into())),
        ] {
            let Ok(Command::Run(args)) =
                parse_words(&["--base-adapter", word, "--save-base-adapter", "o.bin", "t", "q", "h"])
            else {
                panic!("{word} is a source");
            };
            assert_eq!(args.base_adapter, Some(expected));
            assert_eq!(args.save_base_adapter, Some("o.bin".into()));
        }
    }
}
