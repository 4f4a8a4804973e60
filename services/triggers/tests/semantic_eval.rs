//! Accuracy of the top role on the evaluation sets in `eval/` (written apart from the
//! exemplars: `paraphrased` avoids every word of its domain's pack; `in-vocabulary` uses them;
//! `off-topic` belongs to no domain; the `-holdout` sets were written before the exemplars
//! were broadened and the scale chosen, and were not looked at while choosing), with the real
//! MiniLM model, before (triggers alone) and after (with the semantic signal). One role per
//! domain, no current role: a new user's first question. Also the leave-one-out
//! cross-validation over the exemplars alone that chose the semantic scale's defaults.
//! Prints the tables BENCHMARKS.md quotes:
//! `cargo nextest run -p switchyard-triggers --test semantic_eval --no-capture`.

use std::{path::Path, sync::Arc};

use serde::Deserialize;
use switchyard_triggers::{
    TriggerRegistry,
    blend::{Ranking, SemanticScoring},
    packs::DomainPacks,
    registry::{RegistryConfig, RoleInput},
    semantic::{SemanticModel, Similarities},
    store::MemoryStore,
};

#[derive(Deserialize)]
struct Case {
    query: String,
    /// `None`: no domain role should be chosen.
    domain: Option<String>,
}

fn cases(name: &str) -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{name}: {line}: {err}")))
        .collect()
}

async fn registry(model: Arc<SemanticModel>) -> Arc<TriggerRegistry> {
    let packs = Arc::new(DomainPacks::builtin().expect("packs"));
    let names: Vec<String> = packs.names().map(str::to_owned).collect();
    let registry = TriggerRegistry::open(Arc::new(MemoryStore::default()), packs, RegistryConfig::default(), model)
        .await
        .expect("open");
    for name in names {
        let input = RoleInput { role_id: format!("{name}-expert"), domains: vec![name], ..RoleInput::default() };
        registry.register(&input).await.expect("register");
    }
    registry
}

/// Share of `cases` whose top role is their domain's (or none, for off-topic cases), and the
/// misses.
async fn accuracy(registry: &TriggerRegistry, cases: &[Case]) -> (f64, Vec<String>) {
    let mut right = 0;
    let mut misses = Vec::new();
    for case in cases {
        let chosen = registry
            .best_role(&case.query, "", None, |best, _, _| best.role_id.map(|r| r.to_string()))
            .await
            .expect("best role");
        let expected = case.domain.as_ref().map(|d| format!("{d}-expert"));
        if chosen == expected {
            right += 1;
        } else {
            misses.push(format!("{:?} → {chosen:?} (expected {expected:?})", case.query));
        }
    }
    (f64::from(right) / cases.len() as f64, misses)
}

#[tokio::test]
async fn the_semantic_signal_finds_the_domain_of_paraphrased_questions_and_loses_none_that_use_its_words() {
    let model = SemanticModel::load(&switchyard_testkit::model_dir(), 1024).unwrap_or_else(|err| {
        panic!("the MiniLM model is required (scripts/fetch-models.sh or SWITCHYARD_MODEL_DIR): {err}")
    });
    let with_semantic = registry(model).await;
    let triggers_only = registry(SemanticModel::off()).await;
    assert!(with_semantic.current().semantic.is_some(), "the exemplars are indexed");

    let paraphrased = cases("paraphrased.jsonl");
    let in_vocabulary = cases("in-vocabulary.jsonl");
    let off_topic = cases("off-topic.jsonl");
    let paraphrased_holdout = cases("paraphrased-holdout.jsonl");
    let off_topic_holdout = cases("off-topic-holdout.jsonl");
    let packs = DomainPacks::builtin().expect("packs");
    for name in packs.names() {
        for (set_name, set) in [("paraphrased", &paraphrased), ("paraphrased-holdout", &paraphrased_holdout)] {
            let count = set.iter().filter(|c| c.domain.as_deref() == Some(name)).count();
            assert!(count >= 20, "{name} has {count} {set_name} questions");
        }
    }
    // Paraphrased questions use no word of their own domain's pack: no trigger of it matches.
    let mut using_own_words = Vec::new();
    for case in paraphrased.iter().chain(&paraphrased_holdout) {
        let own = format!("{}-expert", case.domain.as_deref().expect("a domain"));
        let matched = triggers_only
            .detect(&case.query, |ranking, _| {
                let own = ranking.roles.iter().find(|r| r.role_id.as_str() == own)?;
                Some(own.triggers.as_ref()?.matched.iter().map(|m| m.pattern.to_owned()).collect::<Vec<_>>())
            })
            .await
            .expect("detect");
        if let Some(patterns) = matched {
            using_own_words.push(format!("{:?} matches {own}'s {patterns:?}", case.query));
        }
    }
    assert!(using_own_words.is_empty(), "{using_own_words:#?}");
    // Kept apart: no evaluation question is an exemplar (of a domain or of the general class).
    let exemplars = packs.iter().flat_map(|p| &p.exemplar_questions).chain(packs.general_questions());
    let exemplars: Vec<&String> = exemplars.collect();
    for case in
        paraphrased.iter().chain(&in_vocabulary).chain(&off_topic).chain(&paraphrased_holdout).chain(&off_topic_holdout)
    {
        let is_exemplar = exemplars.iter().any(|e| e.eq_ignore_ascii_case(&case.query));
        assert!(!is_exemplar, "{:?} is also an exemplar", case.query);
    }

    println!("| set | questions | triggers alone | with the semantic signal |");
    println!("| --- | --- | --- | --- |");
    let mut results = Vec::new();
    for (name, set) in [
        ("paraphrased", &paraphrased),
        ("in-vocabulary", &in_vocabulary),
        ("off-topic", &off_topic),
        ("paraphrased-holdout", &paraphrased_holdout),
        ("off-topic-holdout", &off_topic_holdout),
    ] {
        let (before, _) = accuracy(&triggers_only, set).await;
        let (after, misses) = accuracy(&with_semantic, set).await;
        println!("| {name} | {} | {before:.3} | {after:.3} |", set.len());
        for miss in &misses {
            eprintln!("{name} miss: {miss}");
        }
        results.push((before, after));
    }
    let [
        (paraphrased_before, paraphrased_after),
        (vocabulary_before, vocabulary_after),
        (off_before, off_after),
        (holdout_before, holdout_after),
        (off_holdout_before, off_holdout_after),
    ] = results[..]
    else {
        unreachable!("five sets")
    };
    // Floors a little under what was measured (BENCHMARKS.md), not the measurement: the
    // issue's aim of 0.9 on paraphrased questions is not reached yet (0.80 on both sets).
    assert!(
        paraphrased_after >= 0.78,
        "paraphrased accuracy {paraphrased_after:.3} (triggers alone {paraphrased_before:.3})"
    );
    assert!(paraphrased_after > paraphrased_before + 0.5, "{paraphrased_after:.3} against {paraphrased_before:.3}");
    assert!(
        holdout_after >= 0.77,
        "held-out paraphrased accuracy {holdout_after:.3} (triggers alone {holdout_before:.3})"
    );
    assert!(vocabulary_after >= vocabulary_before, "in-vocabulary {vocabulary_after:.3} < {vocabulary_before:.3}");
    // Small talk goes to no domain role about as often as with triggers alone (the general
    // questions compete with the domains).
    assert!(
        off_after >= 0.9,
        "off-topic questions kept from domain roles: {off_after:.3} (triggers alone {off_before:.3})"
    );
    assert!(
        off_holdout_after >= 0.875,
        "held-out off-topic questions kept from domain roles: {off_holdout_after:.3} (triggers alone {off_holdout_before:.3})"
    );
}

/// Leave-one-out over the exemplars alone (never the evaluation sets): each domain question
/// is routed by every other exemplar and should get its domain's role; each general question
/// is routed by every other and should get none. Triggers take part as in service. The score
/// of a setting is the mean of the two accuracies (a domain question sent to no role and small
/// talk sent to a domain count alike).
struct CrossValidation {
    domain: f64,
    general: f64,
}

impl CrossValidation {
    fn score(&self) -> f64 {
        (self.domain + self.general) / 2.0
    }
}

const FLOORS: [f32; 5] = [0.15, 0.20, 0.25, 0.30, 0.35];
/// `None`: no competing class (the general questions ignored), as before.
const MARGINS: [Option<f32>; 10] =
    [None, Some(-0.04), Some(-0.02), Some(0.0), Some(0.02), Some(0.03), Some(0.04), Some(0.05), Some(0.06), Some(0.08)];
const NEAREST: [usize; 7] = [1, 2, 3, 5, 8, 12, 16];

#[tokio::test]
async fn leave_one_out_over_the_exemplars_chose_the_default_scale() {
    let model = SemanticModel::load(&switchyard_testkit::model_dir(), 0).unwrap_or_else(|err| {
        panic!("the MiniLM model is required (scripts/fetch-models.sh or SWITCHYARD_MODEL_DIR): {err}")
    });
    let registry = registry(model.clone()).await;
    let compiled = registry.current();
    let index = compiled.semantic.as_ref().expect("the exemplars are indexed");
    let packs = registry.packs();
    let mut held: Vec<(&str, Option<String>)> = Vec::new();
    for pack in packs.iter() {
        held.extend(pack.exemplar_questions.iter().map(|q| (q.as_str(), Some(format!("{}-expert", pack.name)))));
    }
    held.extend(packs.general_questions().iter().map(|q| (q.as_str(), None)));
    let role_count = compiled.roles.len();
    let triggers: Vec<_> = held.iter().map(|(text, _)| compiled.matcher.detect(text)).collect();
    let default = SemanticScoring::default();

    let mut results: Vec<(SemanticScoring, bool, CrossValidation)> = Vec::new();
    for nearest in NEAREST {
        let similarities: Vec<Similarities<'_>> = held
            .iter()
            .map(|(text, _)| {
                let vector = model.exemplars().get(text).expect("embedded");
                index.similarities_without(&vector, nearest, text)
            })
            .collect();
        for floor in FLOORS {
            for margin in MARGINS {
                let scoring = SemanticScoring { floor, margin: margin.unwrap_or(0.0), nearest, ..default };
                let (mut domain, mut domain_right, mut general, mut general_right) = (0, 0, 0, 0);
                for (((_, expected), scores), similar) in held.iter().zip(&triggers).zip(&similarities) {
                    let chosen = if scoring.is_clear(scores, role_count) {
                        scores.first().map(|s| s.role_id.to_string())
                    } else {
                        let similar = if margin.is_some() {
                            similar.clone()
                        } else {
                            Similarities { general: None, ..similar.clone() }
                        };
                        let ranking = Ranking::blended(scores.clone(), similar, &scoring);
                        ranking.top().map(|r| r.role_id.to_string())
                    };
                    let right = chosen == *expected;
                    if expected.is_some() {
                        domain += 1;
                        domain_right += usize::from(right);
                    } else {
                        general += 1;
                        general_right += usize::from(right);
                    }
                }
                let cv = CrossValidation {
                    domain: domain_right as f64 / domain as f64,
                    general: general_right as f64 / general as f64,
                };
                results.push((scoring, margin.is_some(), cv));
            }
        }
    }
    results.sort_by(|a, b| b.2.score().total_cmp(&a.2.score()));
    println!(
        "leave-one-out over {} exemplar questions (weight {}, ceiling {}):",
        held.len(),
        default.weight,
        default.ceiling
    );
    println!("| nearest | floor | margin over general | domain questions | general questions | mean |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let row = |(scoring, competing, cv): &(SemanticScoring, bool, CrossValidation)| {
        let margin = if *competing { format!("{:+.2}", scoring.margin) } else { "none (floor only)".into() };
        format!(
            "| {} | {:.2} | {margin} | {:.3} | {:.3} | {:.3} |",
            scoring.nearest,
            scoring.floor,
            cv.domain,
            cv.general,
            cv.score()
        )
    };
    for result in results.iter().take(12) {
        println!("{}", row(result));
    }
    let previous = results
        .iter()
        .find(|(s, competing, _)| !competing && s.nearest == 2 && (s.floor - 0.25).abs() < 1e-6)
        .expect("the previous scale is in the grid");
    println!("previous scale:\n{}", row(previous));
    let chosen = results
        .iter()
        .find(|(s, competing, _)| {
            *competing && s.nearest == default.nearest && s.floor == default.floor && s.margin == default.margin
        })
        .expect("the default scale is in the grid");
    println!("default scale:\n{}", row(chosen));
    println!("the default's nearest and margin at every floor:");
    for result in results
        .iter()
        .filter(|(s, competing, _)| *competing && s.nearest == default.nearest && s.margin == default.margin)
    {
        println!("{}", row(result));
    }
    let best = results[0].2.score();
    assert!(chosen.2.score() >= best - 0.005, "the default scores {:.3}, the grid's best {best:.3}", chosen.2.score());
}
