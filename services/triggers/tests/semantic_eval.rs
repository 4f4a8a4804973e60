//! Accuracy of the top role on the evaluation sets in `eval/` (written apart from the
//! exemplars: `paraphrased` avoids every word of the domain packs; `in-vocabulary` uses them;
//! `off-topic` belongs to no domain), with the real MiniLM model, before (triggers alone) and
//! after (with the semantic signal). One role per domain, no current role: a new user's first
//! question. Prints the table BENCHMARKS.md quotes:
//! `cargo nextest run -p switchyard-triggers --test semantic_eval --no-capture`.

use std::{path::Path, sync::Arc};

use serde::Deserialize;
use switchyard_triggers::{
    TriggerRegistry,
    packs::DomainPacks,
    registry::{RegistryConfig, RoleInput},
    semantic::SemanticModel,
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
    let packs = DomainPacks::builtin().expect("packs");
    for name in packs.names() {
        let count = paraphrased.iter().filter(|c| c.domain.as_deref() == Some(name)).count();
        assert!(count >= 20, "{name} has {count} paraphrased questions");
    }
    // Kept apart: no evaluation question is an exemplar.
    for case in paraphrased.iter().chain(&in_vocabulary).chain(&off_topic) {
        let is_exemplar =
            packs.iter().any(|p| p.exemplar_questions.iter().any(|e| e.eq_ignore_ascii_case(&case.query)));
        assert!(!is_exemplar, "{:?} is also an exemplar", case.query);
    }

    println!("| set | questions | triggers alone | with the semantic signal |");
    println!("| --- | --- | --- | --- |");
    let mut results = Vec::new();
    for (name, set) in [("paraphrased", &paraphrased), ("in-vocabulary", &in_vocabulary), ("off-topic", &off_topic)] {
        let (before, _) = accuracy(&triggers_only, set).await;
        let (after, misses) = accuracy(&with_semantic, set).await;
        println!("| {name} | {} | {before:.3} | {after:.3} |", set.len());
        for miss in &misses {
            eprintln!("{name} miss: {miss}");
        }
        results.push((before, after));
    }
    let [(paraphrased_before, paraphrased_after), (vocabulary_before, vocabulary_after), (off_before, off_after)] =
        results[..]
    else {
        unreachable!("three sets")
    };
    // Floors under what was measured (BENCHMARKS.md), not the measurement: the aim of
    // 0.9 on paraphrased questions is not reached yet (0.80 with the default scale).
    assert!(
        paraphrased_after >= 0.75,
        "paraphrased accuracy {paraphrased_after:.3} (triggers alone {paraphrased_before:.3})"
    );
    assert!(paraphrased_after > paraphrased_before + 0.5, "{paraphrased_after:.3} against {paraphrased_before:.3}");
    assert!(vocabulary_after >= vocabulary_before, "in-vocabulary {vocabulary_after:.3} < {vocabulary_before:.3}");
    assert!(
        off_after >= 0.5,
        "off-topic questions kept from domain roles: {off_after:.3} (triggers alone {off_before:.3})"
    );
}
