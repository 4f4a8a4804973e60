//! Embedding latency with all-MiniLM-L6-v2 (`scripts/fetch-models.sh`; `SWITCHYARD_MODEL_DIR`
//! overrides the folder): one short query (what the gateway embeds per request) and a batch of
//! 32 tool texts (what it embeds when a tool list changes).
//!
//! Baselines in the same run: `tokenize` (the tokenizer alone, the floor no model call can go
//! under) and `padded` — the first implementation: the tokenizer pads the whole batch to its
//! longest text, one forward pass with an attention mask, texts in input order.
//!
//! The single-text encoder on each of its dense kernels (`one_query/<kernels>`): `candle` (its
//! dense layers on candle's matrix product, the encoder before its own kernels), then ours in
//! `int8` and `f32` at the best SIMD level on one thread (`/1t`) and on two (`/2t`: each dense
//! layer split between the calling thread and a helper), and in plain code (`scalar`) on one.
//! `SWITCHYARD_SIMD=scalar` caps the levels measured. `one_query/embed` is the embedder as
//! configured (`SWITCHYARD_ENCODER`, default int8 at the best level;
//! `SWITCHYARD_QUERY_THREADS`, default 2 on two or more cores).
//!
//! `one_query_cpu` repeats the query rows measuring the process's CPU time (every thread's,
//! from `/proc/self/task/*/schedstat`) instead of wall time: on a machine whose cores are
//! oversubscribed, wall time mostly measures how long the scheduler keeps the thread waiting,
//! CPU time what the work costs.

use std::hint::black_box;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use criterion::{
    Criterion, Throughput, criterion_group, criterion_main,
    measurement::{Measurement, ValueFormatter},
};
use switchyard_models::{DenseKernels, Embedder, Simd};
use switchyard_testkit::model_dir;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

const QUERY: &str = "Can I find academic research papers about climate change?";

/// Tool texts as `tool_document` writes them, of mixed lengths like a real tool list.
const TOOLS: [&str; 32] = [
    "WeatherNow: Current weather and forecasts for any city.",
    "FlightFinder: Search and compare airline tickets across hundreds of airlines and travel agencies, with price alerts.",
    "RecipeBox: Cooking recipes by ingredient.",
    "AI2sql: Converts a natural language text into an SQL query.",
    "ResearchHelper: Find academic papers, citations and bibliographies; export references as BibTeX.",
    "CurrencyConverter: Convert between currencies with live exchange rates.",
    "StockTracker: Real-time stock quotes, historical prices, company fundamentals, earnings calendars and analyst ratings for listed companies worldwide.",
    "Translator: Translate text between more than one hundred languages.",
    "MapRoutes: Directions for driving, walking, cycling and public transport, with traffic.",
    "NewsDigest: Summaries of today's top news by topic and region.",
    "JobBoard: Search job openings by title, skills, salary range and location; get alerts for new postings.",
    "CalendarSync: Create, move and cancel events in your calendar.",
    "HotelBooker: Find and book hotels, compare prices and read guest reviews.",
    "FitnessCoach: Personalised workout plans and progress tracking.",
    "MovieGuide: Showtimes, reviews, trailers and streaming availability for films and series.",
    "PDFReader: Ask questions about a PDF document and get answers with page references.",
    "CodeRunner: Execute Python snippets in a sandbox and return their output, plots and errors.",
    "ShoppingAssistant: Compare product prices across online stores.",
    "Dictionary: Definitions, synonyms, pronunciation and example sentences for English words.",
    "TaxHelper: Estimate income tax and find deductions for your country and situation, with explanations of the rules that apply.",
    "PetCare: Advice on feeding, training and caring for dogs and cats.",
    "WineSommelier: Wine pairings for any dish.",
    "RealEstate: Listings of homes for sale and rent, with neighbourhood data, school ratings and mortgage estimates.",
    "Crypto: Prices and charts of cryptocurrencies.",
    "LegalAdvisor: Plain-language explanations of common legal questions and documents such as leases and contracts.",
    "SpeechCoach: Feedback on presentations and public speaking.",
    "Astronomy: Tonight's sky: planets, constellations and satellite passes for your location.",
    "GiftIdeas: Gift suggestions by recipient, occasion and budget.",
    "MathSolver: Step-by-step solutions to algebra, calculus and statistics problems.",
    "TravelPlanner: Day-by-day itineraries with sights, restaurants and transport between them for any destination.",
    "Podcasts: Discover podcasts and episodes by topic.",
    "SportsScores: Live scores, fixtures and league tables for football, basketball, tennis and more.",
];

/// The first implementation, kept here as the baseline: batch padded to its longest text.
struct Padded {
    model: BertModel,
    tokenizer: Tokenizer,
}

impl Padded {
    fn load() -> Self {
        let dir = model_dir();
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("config");
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).expect("tokenizer");
        tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: 256, ..Default::default() }))
            .expect("truncation");
        let weights = std::fs::read(dir.join("model.safetensors")).expect("weights");
        let vars = VarBuilder::from_buffered_safetensors(weights, DTYPE, &Device::Cpu).expect("weights");
        Self { model: BertModel::load(vars, &config).expect("model"), tokenizer }
    }

    fn embed(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).expect("tokenize");
        let length = encodings[0].get_ids().len();
        let ids: Vec<u32> = encodings.iter().flat_map(|e| e.get_ids().iter().copied()).collect();
        let mask: Vec<u32> = encodings.iter().flat_map(|e| e.get_attention_mask().iter().copied()).collect();
        let shape = (texts.len(), length);
        let input_ids = Tensor::from_vec(ids, shape, &Device::Cpu).expect("ids");
        let attention = Tensor::from_vec(mask, shape, &Device::Cpu).expect("mask");
        let token_types = input_ids.zeros_like().expect("types");
        let hidden = self.model.forward(&input_ids, &token_types, Some(&attention)).expect("forward");
        let weights = attention.to_dtype(DType::F32).and_then(|w| w.unsqueeze(2)).expect("weights");
        let mean = hidden
            .broadcast_mul(&weights)
            .and_then(|h| h.sum(1))
            .and_then(|s| s.broadcast_div(&weights.sum(1)?))
            .expect("mean");
        let norms = mean.sqr().and_then(|m| m.sum_keepdim(1)).and_then(|m| m.sqrt()).expect("norms");
        mean.broadcast_div(&norms).and_then(|m| m.to_vec2()).expect("vectors")
    }
}

/// CPU time of all the process's threads, in nanoseconds (Linux).
struct CpuTime;

fn cpu_nanos() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()))
        .sum()
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        cpu_nanos()
    }
    fn end(&self, started: u64) -> u64 {
        cpu_nanos().saturating_sub(started)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Milliseconds
    }
}

/// CPU nanoseconds shown as milliseconds.
struct Milliseconds;

impl ValueFormatter for Milliseconds {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e6);
        "ms (CPU)"
    }
    fn scale_throughputs(&self, _typical: f64, _throughput: &Throughput, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e6);
        "ms (CPU)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns (CPU)"
    }
}

/// The query rows: the single-text encoder on each kernel; ours at the best SIMD level on one
/// thread and on two (the dense layers split, see `Embedder::with_query_threads`).
fn single_texts() -> Vec<Embedder> {
    let best = Simd::detect();
    let load = |kernels: DenseKernels, threads: usize| {
        Embedder::load_with(&model_dir(), kernels).expect("model").with_query_threads(threads)
    };
    let mut encoders = vec![load(DenseKernels::Candle, 1)];
    for kernels in [DenseKernels::Int8(best), DenseKernels::F32(best)] {
        encoders.extend([load(kernels, 1), load(kernels, 2)]);
    }
    if best != Simd::Scalar {
        encoders.extend([load(DenseKernels::Int8(Simd::Scalar), 1), load(DenseKernels::F32(Simd::Scalar), 1)]);
    }
    encoders
}

/// `int8/avx2/2t`: the kernels and the threads of a query row.
fn label(encoder: &Embedder) -> String {
    match encoder.kernels() {
        DenseKernels::Candle => "candle".to_owned(),
        kernels => format!("{}/{}t", kernels.name(), encoder.query_threads()),
    }
}

fn cpu(c: &mut Criterion<CpuTime>) {
    let padded = Padded::load();
    let encoders = single_texts();
    let mut one = c.benchmark_group("one_query_cpu");
    one.bench_function("padded", |b| b.iter(|| padded.embed(black_box(&[QUERY]))));
    for encoder in &encoders {
        one.bench_function(label(encoder), |b| b.iter(|| encoder.embed(black_box(&[QUERY])).expect("embed")));
    }
    one.finish();
}

fn bench(c: &mut Criterion) {
    let embedder = Embedder::load(&model_dir()).expect("model present: run scripts/fetch-models.sh");
    let padded = Padded::load();
    // Both paths must give the same vectors, or the comparison means nothing: checked in f32
    // (a call's single texts may run in int8, which the models tests check separately).
    let exact = Embedder::load_with(&model_dir(), DenseKernels::F32(Simd::detect())).expect("model");
    let (new, old) = (exact.embed(&TOOLS).expect("embed"), padded.embed(&TOOLS));
    for (a, b) in new.iter().zip(&old) {
        let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cosine > 0.9999, "the batched path changes an embedding: cosine {cosine}");
    }

    let encoders = single_texts();

    let mut one = c.benchmark_group("one_query");
    one.bench_function("embed", |b| b.iter(|| embedder.embed(black_box(&[QUERY])).expect("embed")));
    one.bench_function("padded", |b| b.iter(|| padded.embed(black_box(&[QUERY]))));
    for encoder in &encoders {
        one.bench_function(label(encoder), |b| b.iter(|| encoder.embed(black_box(&[QUERY])).expect("embed")));
    }
    one.bench_function("tokenize", |b| {
        b.iter(|| padded.tokenizer.encode_fast(black_box(QUERY), true).expect("tokenize"))
    });
    one.finish();

    let mut tools = c.benchmark_group("tools_32");
    tools.sample_size(20);
    tools.bench_function("embed", |b| b.iter(|| embedder.embed(black_box(&TOOLS)).expect("embed")));
    tools.bench_function("padded", |b| b.iter(|| padded.embed(black_box(&TOOLS))));
    tools.finish();
}

criterion_group!(benches, bench);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(CpuTime);
    targets = cpu
}
criterion_main!(benches, cpu_time);
