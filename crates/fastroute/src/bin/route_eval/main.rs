//! `switchyard-route-eval`: measures the fast router on labelled messages (see `--help`).
//! Exemplars are embedded once; each fold of a cross-validation gets a router built from the
//! embeddings of the exemplars it keeps, then decides its cases one by one, timed, exactly as
//! the router service would (one embedding and one scoring per message).

mod args;
mod cases;
mod report;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;
use switchyard_fastroute::{Exemplars, FastRouter, Tuning};
use switchyard_models::Embedder;

use args::{Args, Command, HELP};
use cases::{Case, Labels};
use report::Confusion;

fn main() -> ExitCode {
    match args::parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Command::Run(args)) => match run(&args) {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("switchyard-route-eval: {err:#}");
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!(
                "switchyard-route-eval: {err}\nusage: switchyard-route-eval [OPTIONS] CASES [EXEMPLARS] (see --help)"
            );
            ExitCode::from(2)
        }
    }
}

/// `$SWITCHYARD_MODEL_DIR`, else `models/all-MiniLM-L6-v2` here, else the workspace's.
fn model_dir(args: &Args) -> PathBuf {
    if let Some(dir) = &args.model_dir {
        return dir.clone();
    }
    if let Some(dir) = std::env::var_os("SWITCHYARD_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    let here = PathBuf::from("models/all-MiniLM-L6-v2");
    if here.is_dir() { here } else { Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2") }
}

fn run(args: &Args) -> Result<String> {
    let text = std::fs::read_to_string(&args.cases).with_context(|| format!("reading {}", args.cases.display()))?;
    let (labels, cases) = cases::parse(&text).map_err(|err| anyhow::anyhow!("{}: {err}", args.cases.display()))?;
    let exemplars = match &args.exemplars {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Exemplars::parse(&text).with_context(|| format!("{}", path.display()))?
        }
        None => Exemplars::builtin().context("the built-in exemplars")?,
    };
    let case_texts: HashSet<&str> = cases.iter().map(|case| case.message.as_str()).collect();
    let exemplars = if args.exclude_cases {
        exemplars.without(|item| case_texts.contains(item.message.as_str())).context("excluding the cases")?
    } else {
        exemplars
    };

    let dir = model_dir(args);
    let embedder = Arc::new(Embedder::load(&dir).with_context(|| format!("loading the model from {}", dir.display()))?);
    let texts: Vec<&str> = exemplars.items().iter().map(|item| item.message.as_str()).collect();
    let vectors = embedder.embed(&texts).context("embedding the exemplars")?;

    let folds = args.folds.unwrap_or(1);
    let mut confusion = Confusion::new(labels.names());
    let mut fold_reports = Vec::new();
    let mut millis = Vec::with_capacity(cases.len());
    let mut exemplars_used = Vec::new();
    for fold in 0..folds {
        let in_fold = |case: &&Case| folds == 1 || cases::fold_of(&case.message, folds) == fold;
        let fold_cases: Vec<&Case> = cases.iter().filter(in_fold).collect();
        let held_out: HashSet<&str> = fold_cases.iter().map(|case| case.message.as_str()).collect();
        // In cross-validation a fold's own texts are never among its exemplars.
        let keep: Vec<bool> =
            exemplars.items().iter().map(|item| folds == 1 || !held_out.contains(item.message.as_str())).collect();
        let kept = exemplars.select(&keep).with_context(|| format!("fold {fold}"))?;
        let kept_vectors: Vec<f32> = vectors
            .iter()
            .zip(&keep)
            .filter(|(_, keep)| **keep)
            .flat_map(|(vector, _)| vector.iter().copied())
            .collect();
        exemplars_used.push(kept.len());
        let router = FastRouter::from_vectors(embedder.clone(), kept, kept_vectors, args.tuning)?;
        let mut fold_confusion = Confusion::new(labels.names());
        // The first query of a thread sets up its one-thread pool: not a decision's cost.
        router.decide("warm up", None)?;
        for case in fold_cases {
            let started = Instant::now();
            let decision = router.decide(&case.message, None)?;
            millis.push(started.elapsed().as_secs_f64() * 1000.0);
            let predicted = labels.class(decision.route);
            confusion.add(case.expected, predicted);
            fold_confusion.add(case.expected, predicted);
        }
        fold_reports.push(fold_confusion);
    }
    if confusion.total() == 0 {
        bail!("no case was decided");
    }

    let mut report = json!({
        "accuracy": confusion.accuracy(),
        "cases": confusion.total(),
        "labels": match labels { Labels::ThreeWay => "three_way", Labels::NeedsTools => "direct_vs_not_direct" },
        "per_route": confusion.per_class(),
        "confusion": confusion.to_json(),
        "latency_ms": report::latency(millis),
        "exemplars": exemplars_used.iter().copied().max().unwrap_or(0),
        "excluded_cases_from_exemplars": args.exclude_cases,
        "tuning": tuning_json(&args.tuning),
    });
    if folds > 1 {
        let accuracies: Vec<f64> = fold_reports.iter().map(Confusion::accuracy).collect();
        let mean = accuracies.iter().sum::<f64>() / accuracies.len() as f64;
        let spread = (accuracies.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / accuracies.len() as f64).sqrt();
        report["folds"] = json!({
            "count": folds,
            "accuracy_per_fold": accuracies,
            "mean_accuracy": mean,
            "std_accuracy": spread,
            "exemplars_per_fold": exemplars_used,
            "note": "top-level accuracy pools every case, each decided by the router of its own fold",
        });
    }
    Ok(serde_json::to_string_pretty(&report)?)
}

fn tuning_json(tuning: &Tuning) -> serde_json::Value {
    json!({
        "k": tuning.k,
        "temperature": tuning.temperature,
        "head_weight": tuning.head_weight,
        "direct_prior": tuning.direct_prior,
        "lexical_weight": tuning.lexical_weight,
        "l2": tuning.l2,
        "steps": tuning.steps,
        "learning_rate": tuning.learning_rate,
    })
}
