//! Trigger detection in process.
//!
//! - `builtin`: one role per built-in domain pack, a ~300-character query.
//! - `synthetic/<n>`: n generated patterns (80 % keywords, 15 % phrases, 5 % regexes) spread
//!   over roles of 500 patterns, the compiled matcher against a naive baseline that keeps one
//!   `regex::Regex` per pattern and tries them all in a loop, on the same query.
//! - `build/<n>`: compiling the matcher (what a registry change costs, off the request path).
//! - `decision/*`: GetBestRole's decision through the registry (no gRPC), one role per domain,
//!   with the real MiniLM model loaded: a query with a clear trigger decision (the semantic
//!   signal is not computed), the same query with no model at all (the baseline), and a query
//!   no trigger matches, decided by the semantic signal from the recent-queries cache and
//!   with a fresh embedding.
//!
//! Run: `cargo bench -p switchyard-triggers --bench detect`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::sync::Arc;

use switchyard_triggers::{
    TriggerRegistry,
    domain::{Limits, RoleId, RoleRegistration, Trigger, TriggerKind},
    matcher::{Matcher, Scoring},
    packs::DomainPacks,
    registry::{RegistryConfig, RoleInput},
    semantic::SemanticModel,
    store::MemoryStore,
};

const BUILTIN_QUERY: &str = "We are a small tech startup building a Kubernetes-based data platform. \
    What are the best investment strategies for our seed round, how should we budget cloud costs and \
    payroll over the next year, and which compliance rules (GDPR, contracts with enterprise customers) \
    should our legal counsel review before launch?";

fn role(id: &str, domains: &[&str], custom: Vec<Trigger>) -> RoleRegistration {
    RoleRegistration {
        role_id: RoleId::parse(id).expect("valid role id"),
        domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        custom_triggers: custom,
        description: String::new(),
        example_questions: Vec::new(),
        updated_at: chrono::Utc::now(),
    }
}

/// Pronounceable nonsense words, so generated patterns never collide with English.
fn word(rng: &mut StdRng) -> String {
    const CONSONANTS: &[u8] = b"bcdfghjklmnpqrstvwxz";
    const VOWELS: &[u8] = b"aeiou";
    let syllables = rng.random_range(3..=4);
    let mut out = String::new();
    for _ in 0..syllables {
        out.push(CONSONANTS[rng.random_range(0..CONSONANTS.len())] as char);
        out.push(VOWELS[rng.random_range(0..VOWELS.len())] as char);
    }
    out
}

struct Synthetic {
    roles: Vec<RoleRegistration>,
    query: String,
}

fn synthetic(patterns: usize) -> Synthetic {
    let mut rng = StdRng::seed_from_u64(patterns as u64);
    let limits = Limits { max_custom_triggers: usize::MAX, ..Limits::default() };
    let mut roles = Vec::new();
    let mut hit_words = Vec::new();
    let mut custom = Vec::new();
    for index in 0..patterns {
        let (pattern, kind) = match index % 20 {
            0 => (format!(r"\b{}(?:s|ing|ed)?\b", word(&mut rng)), TriggerKind::Regex),
            1..=3 => (format!("{} {}", word(&mut rng), word(&mut rng)), TriggerKind::Phrase),
            _ => (word(&mut rng), TriggerKind::Keyword),
        };
        if kind == TriggerKind::Keyword && index % 97 == 4 && hit_words.len() < 6 {
            hit_words.push(pattern.clone());
        }
        let priority = rng.random_range(1..=8);
        custom.push(Trigger::new(&pattern, kind, priority, &limits, "bench").expect("valid pattern"));
        if custom.len() == 500 || index + 1 == patterns {
            roles.push(role(&format!("role-{}", roles.len()), &[], std::mem::take(&mut custom)));
        }
    }
    // A ~300-character query: ordinary prose with a few of the generated keywords in it.
    let mut query = String::from("Could you help me understand ");
    for (i, hit) in hit_words.iter().enumerate() {
        query.push_str(hit);
        query.push_str(if i % 2 == 0 { " and the impact on " } else { " together with " });
    }
    while query.len() < 300 {
        query.push_str("our plans for the coming quarter, ");
    }
    query.truncate(300);
    Synthetic { roles, query }
}

/// The naive approach: one compiled regex per pattern, all tried for every query.
struct Naive {
    patterns: Vec<(regex::Regex, usize, u32)>,
}

impl Naive {
    fn build(roles: &[RoleRegistration]) -> Self {
        let mut patterns = Vec::new();
        for (role_index, role) in roles.iter().enumerate() {
            for trigger in &role.custom_triggers {
                let source = match trigger.kind {
                    TriggerKind::Keyword => format!(r"(?i)\b{}\b", regex::escape(&trigger.pattern)),
                    TriggerKind::Phrase => {
                        let words: Vec<_> = trigger.pattern.split(' ').map(regex::escape).collect();
                        format!(r"(?i)\b{}\b", words.join(r"\s+"))
                    }
                    TriggerKind::Regex => format!("(?i){}", trigger.pattern),
                };
                patterns.push((regex::Regex::new(&source).expect("valid regex"), role_index, trigger.priority));
            }
        }
        Self { patterns }
    }

    fn detect(&self, query: &str, roles: usize) -> Vec<u32> {
        let mut scores = vec![0u32; roles];
        for (regex, role, priority) in &self.patterns {
            if regex.is_match(query) {
                scores[*role] += priority;
            }
        }
        scores
    }
}

fn builtin(c: &mut Criterion) {
    let packs = DomainPacks::builtin().expect("packs");
    let roles: Vec<_> = packs.names().map(|name| role(&format!("{name}-expert"), &[name], Vec::new())).collect();
    let matcher = Matcher::build(&roles, &packs, Scoring::default()).expect("matcher");
    assert!(matcher.detect(BUILTIN_QUERY).len() >= 3, "the query should match several domains");
    c.bench_function("builtin/detect_300_chars", |b| b.iter(|| matcher.detect(black_box(BUILTIN_QUERY))));
}

fn scaling(c: &mut Criterion) {
    let packs = DomainPacks::default();
    let mut group = c.benchmark_group("synthetic");
    for size in [500usize, 5_000, 50_000] {
        let data = synthetic(size);
        let matcher = Matcher::build(&data.roles, &packs, Scoring::default()).expect("matcher");
        let naive = Naive::build(&data.roles);
        let compiled_hits = matcher.detect(&data.query).len();
        let naive_hits = naive.detect(&data.query, data.roles.len()).iter().filter(|s| **s > 0).count();
        assert_eq!(compiled_hits, naive_hits, "both approaches find the same roles");
        assert!(compiled_hits > 0, "the query hits something");
        if size >= 50_000 {
            group.sample_size(20);
        }
        group.bench_with_input(BenchmarkId::new("compiled", size), &data.query, |b, q| {
            b.iter(|| matcher.detect(black_box(q)))
        });
        group.bench_with_input(BenchmarkId::new("naive", size), &data.query, |b, q| {
            b.iter(|| naive.detect(black_box(q), data.roles.len()))
        });
    }
    group.finish();
}

fn build(c: &mut Criterion) {
    let packs = DomainPacks::default();
    let mut group = c.benchmark_group("build");
    group.sample_size(10);
    for size in [5_000usize, 50_000] {
        let data = synthetic(size);
        group.bench_with_input(BenchmarkId::from_parameter(size), &data.roles, |b, roles| {
            b.iter(|| Matcher::build(black_box(roles), &packs, Scoring::default()).expect("matcher"))
        });
    }
    group.finish();
}

async fn domain_registry(model: Arc<SemanticModel>) -> Arc<TriggerRegistry> {
    let packs = Arc::new(DomainPacks::builtin().expect("packs"));
    let names: Vec<String> = packs.names().map(str::to_owned).collect();
    let store = Arc::new(MemoryStore::default());
    let registry = TriggerRegistry::open(store, packs, RegistryConfig::default(), model).await.expect("registry");
    for name in names {
        let input = RoleInput { role_id: format!("{name}-expert"), domains: vec![name], ..RoleInput::default() };
        registry.register(&input).await.expect("register");
    }
    registry
}

fn decision(c: &mut Criterion) {
    const CLEAR: &str = "Should I refinance my mortgage at a 6% interest rate, or pay down the loan faster?";
    const PARAPHRASED: &str = "My toe turned purple after I stubbed it on the door frame; is it broken?";
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let model = SemanticModel::load(&switchyard_testkit::model_dir(), 4096)
        .unwrap_or_else(|err| panic!("the MiniLM model is required (scripts/fetch-models.sh): {err}"));
    let (with_model, without) =
        runtime.block_on(async { (domain_registry(model).await, domain_registry(SemanticModel::off()).await) });
    let decide = |registry: &TriggerRegistry, query: &str| {
        runtime.block_on(registry.best_role(query, "", None, |best, ranking, _| (best.role_id, ranking.semantic_state)))
    };
    let (role, state) = decide(&with_model, CLEAR).expect("decides");
    assert_eq!((role.as_ref().map(RoleId::as_str), format!("{state:?}")), (Some("finance-expert"), "NotNeeded".into()));
    let (role, state) = decide(&with_model, PARAPHRASED).expect("decides");
    assert_eq!((role.as_ref().map(RoleId::as_str), format!("{state:?}")), (Some("healthcare-expert"), "Scored".into()));

    let mut group = c.benchmark_group("decision");
    group.bench_function("triggers_clear/no_model", |b| b.iter(|| decide(&without, black_box(CLEAR))));
    group.bench_function("triggers_clear/with_model", |b| b.iter(|| decide(&with_model, black_box(CLEAR))));
    group.bench_function("semantic/cached_query", |b| b.iter(|| decide(&with_model, black_box(PARAPHRASED))));
    // A query never seen before each time: the embedding on the blocking pool is the cost.
    let mut fresh = 0u64;
    group.sample_size(30);
    group.bench_function("semantic/embedded_query", |b| {
        b.iter(|| {
            fresh += 1;
            decide(&with_model, &format!("{PARAPHRASED} ({fresh})"))
        })
    });
    group.finish();
}

criterion_group!(benches, builtin, scaling, build, decision);
criterion_main!(benches);
