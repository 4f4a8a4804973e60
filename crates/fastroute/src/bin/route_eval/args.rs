//! The command line of `switchyard-route-eval`. Parsing never exits or panics; `main` decides
//! what a mistake prints and the exit code.

use std::path::PathBuf;

use switchyard_fastroute::Tuning;

pub const HELP: &str = "\
Measures the fast router on labelled messages and prints one JSON object: accuracy, per-route
precision and recall, the confusion matrix and per-decision latency.

usage: switchyard-route-eval [OPTIONS] CASES [EXEMPLARS]

arguments:
  CASES      JSON lines, either {\"message\", \"route\"} (three-way: direct, mcp_agent,
             multiagent) or {\"query\", \"needs_tools\"} (direct against not direct)
  EXEMPLARS  the router's exemplars, {\"message\", \"route\"} lines (default: the built-in set)

options:
  --exclude-cases-from-exemplars  leave out exemplars whose text equals a case
  --folds N                       k-fold cross-validation: cases split in N folds by text; each
                                  fold is decided by a router without that fold's texts
  --model-dir DIR                 the MiniLM folder (default: $SWITCHYARD_MODEL_DIR, else
                                  models/all-MiniLM-L6-v2)
  --tune KEY=VALUE[,KEY=VALUE]    override the classifier's tuning: k, temperature,
                                  head_weight, direct_prior, lexical_weight, l2, steps, learning_rate
  -h, --help                      print this help
";

#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub cases: PathBuf,
    pub exemplars: Option<PathBuf>,
    pub exclude_cases: bool,
    pub folds: Option<usize>,
    pub model_dir: Option<PathBuf>,
    pub tuning: Tuning,
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Help,
    Run(Args),
}

/// Parses the arguments after the program name; the error is one line naming the mistake.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut positional = Vec::new();
    let mut exclude_cases = false;
    let mut folds = None;
    let mut model_dir = None;
    let mut tuning = Tuning::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        // `--name=value` and `--name value` both work.
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name.to_owned(), Some(value.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{name} needs {what}"));
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--exclude-cases-from-exemplars" => exclude_cases = true,
            "--folds" => {
                let text = value("a number")?;
                let count: usize = text.parse().map_err(|_| format!("--folds: `{text}` is not a number"))?;
                if count < 2 {
                    return Err("--folds needs at least 2".to_owned());
                }
                folds = Some(count);
            }
            "--model-dir" => model_dir = Some(PathBuf::from(value("a DIR")?)),
            "--tune" => tune(&mut tuning, &value("KEY=VALUE pairs")?)?,
            "--" => positional.extend(args.by_ref()),
            _ if arg.starts_with('-') && arg != "-" => return Err(format!("unknown option `{arg}`")),
            _ => positional.push(arg),
        }
    }
    let mut files = positional.into_iter().map(PathBuf::from);
    match (files.next(), files.next(), files.next()) {
        (Some(cases), exemplars, None) => {
            Ok(Command::Run(Args { cases, exemplars, exclude_cases, folds, model_dir, tuning }))
        }
        (_, _, Some(extra)) => Err(format!("unexpected argument `{}`", extra.display())),
        (None, _, _) => Err("expected the CASES file".to_owned()),
    }
}

fn tune(tuning: &mut Tuning, pairs: &str) -> Result<(), String> {
    for pair in pairs.split(',').filter(|pair| !pair.is_empty()) {
        let (key, text) = pair.split_once('=').ok_or(format!("--tune: `{pair}` is not KEY=VALUE"))?;
        let number: f32 = text.parse().map_err(|_| format!("--tune: `{text}` is not a number"))?;
        let whole = || -> Result<usize, String> {
            if number >= 0.0 && number.fract() == 0.0 {
                Ok(number as usize)
            } else {
                Err(format!("--tune: {key} needs a whole number"))
            }
        };
        match key {
            "k" => tuning.k = whole()?,
            "steps" => tuning.steps = whole()?,
            "temperature" => tuning.temperature = number,
            "head_weight" => tuning.head_weight = number,
            "direct_prior" => tuning.direct_prior = number,
            "l2" => tuning.l2 = number,
            "lexical_weight" => tuning.lexical_weight = number,
            "learning_rate" => tuning.learning_rate = number,
            _ => return Err(format!("--tune: unknown key `{key}`")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn parses_files_and_options() {
        let Ok(Command::Run(args)) = run(&["--folds", "5", "--tune=k=3,direct_prior=0.1", "cases.jsonl", "ex.jsonl"])
        else {
            panic!("not a run");
        };
        assert_eq!(args.folds, Some(5));
        assert_eq!(args.tuning.k, 3);
        assert_eq!(args.exemplars, Some(PathBuf::from("ex.jsonl")));
        assert_eq!(run(&["x", "--help"]), Ok(Command::Help));
    }

    #[test]
    fn mistakes_are_one_line_errors() {
        assert_eq!(run(&[]), Err("expected the CASES file".to_owned()));
        assert!(run(&["--folds", "1", "c"]).is_err());
        assert!(run(&["--folds"]).is_err());
        assert!(run(&["--tune", "k=1.5", "c"]).is_err());
        assert!(run(&["--bogus", "c"]).is_err());
        assert!(run(&["a", "b", "c"]).is_err());
    }
}
