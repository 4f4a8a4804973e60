//! Prefill and decode speed of the local model, against candle's `quantized_llama` on the
//! same file in the same run, and the machine's memory-bandwidth bound.
//!
//! `cargo bench -p switchyard-local-llm --bench generate` (the model from
//! `scripts/fetch-models.sh`; `SWITCHYARD_MODELS_DIR` overrides the folder). A plain
//! program rather than criterion: it measures streams running side by side and derives
//! the ceiling from a bandwidth measurement, which criterion's one-closure model does not
//! express; each figure is the median of several runs.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use candle_core::{Device, Tensor, quantized::gguf_file};
use candle_transformers::models::quantized_llama::ModelWeights;
use switchyard_local_llm::{LocalModel, Logits, default_model_dir, generate::argmax};

const PROMPT_TOKENS: usize = 30;
const DECODE_TOKENS: usize = 64;
const RUNS: usize = 5;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A 30-token ChatML prompt.
fn prompt(model: &LocalModel) -> Vec<u32> {
    let text = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nExplain in a few sentences why the sky looks blue during the day and red at sunset, please.<|im_end|>\n<|im_start|>assistant\n";
    let mut ids = model.tokenizer().encode_with_specials(text).expect("encode");
    assert!(ids.len() >= PROMPT_TOKENS, "prompt has {} tokens", ids.len());
    ids.drain(..ids.len() - PROMPT_TOKENS);
    ids
}

struct Run {
    prefill: Duration,
    decode_tokens_per_s: f64,
}

/// How a stream computes: on `n` threads of its own, or adaptively on a shared pool (the
/// provider's default: the pool while alone, one thread while another stream runs).
#[derive(Clone, Copy)]
enum Threads<'a> {
    Fixed(usize),
    Adaptive(&'a (Arc<rayon::ThreadPool>, Arc<AtomicUsize>)),
}

/// One stream: prefill the prompt, then decode greedily (no early stop).
fn ours(model: &LocalModel, prompt: &[u32], threads: Threads<'_>) -> Run {
    let mut session = match threads {
        Threads::Fixed(n) => model.session(512, n),
        Threads::Adaptive((pool, busy)) => model.adaptive_session(512, pool.clone(), busy.clone()),
    };
    let started = Instant::now();
    let mut logits = session.forward(prompt, Logits::Last).expect("prefill");
    let prefill = started.elapsed();
    let started = Instant::now();
    for _ in 0..DECODE_TOKENS {
        let next = argmax(&logits);
        logits = session.forward(&[next], Logits::Last).expect("decode");
    }
    Run { prefill, decode_tokens_per_s: DECODE_TOKENS as f64 / started.elapsed().as_secs_f64() }
}

fn candle(model: &LocalModel, prompt: &[u32]) -> Run {
    let mut file = std::fs::File::open(model.path()).expect("open");
    let content = gguf_file::Content::read(&mut file).expect("gguf");
    let mut weights = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("candle model");
    let input = Tensor::new(prompt, &Device::Cpu).and_then(|t| t.unsqueeze(0)).expect("input");
    let started = Instant::now();
    let logits = weights.forward(&input, 0).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>());
    let mut next = argmax(&logits.expect("prefill"));
    let prefill = started.elapsed();
    let started = Instant::now();
    for i in 0..DECODE_TOKENS {
        let input = Tensor::new(&[next], &Device::Cpu).and_then(|t| t.unsqueeze(0)).expect("input");
        let logits =
            weights.forward(&input, prompt.len() + i).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>());
        next = argmax(&logits.expect("decode"));
    }
    Run { prefill, decode_tokens_per_s: DECODE_TOKENS as f64 / started.elapsed().as_secs_f64() }
}

fn summarize(runs: &[Run]) -> (f64, f64) {
    (
        median(runs.iter().map(|r| r.prefill.as_secs_f64() * 1e3).collect()),
        median(runs.iter().map(|r| r.decode_tokens_per_s).collect()),
    )
}

/// Read bandwidth: sums of a 1 GiB buffer, on `threads` threads each summing its part.
fn bandwidth(buffer: &[u64], threads: usize) -> f64 {
    let mut best = 0f64;
    for _ in 0..3 {
        let started = Instant::now();
        let total: u64 = std::thread::scope(|scope| {
            let parts: Vec<_> = buffer
                .chunks(buffer.len().div_ceil(threads))
                .map(|part| scope.spawn(move || switchyard_local_llm::quant::vectorized(|| sum(part))))
                .collect();
            parts.into_iter().map(|p| p.join().expect("thread")).fold(0, u64::wrapping_add)
        });
        let seconds = started.elapsed().as_secs_f64();
        std::hint::black_box(total);
        best = best.max(std::mem::size_of_val(buffer) as f64 / seconds / 1e9);
    }
    best
}

#[inline(always)]
fn sum(values: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let (chunks, rest) = values.as_chunks::<8>();
    for chunk in chunks {
        for i in 0..8 {
            lanes[i] = lanes[i].wrapping_add(chunk[i]);
        }
    }
    lanes.iter().chain(rest).fold(0, |a, b| a.wrapping_add(*b))
}

fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_default()
    };
    let flags = field("flags");
    let vector: Vec<&str> = ["avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni"]
        .into_iter()
        .filter(|f| flags.split_whitespace().any(|x| x == *f))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    format!("{} ({cores} cores; {})", field("model name"), vector.join(" "))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let dir = default_model_dir();
    let model: Arc<LocalModel> = LocalModel::load(&dir).unwrap_or_else(|err| panic!("{err}"));
    let prompt = prompt(&model);
    println!("CPU: {}", cpu());
    println!("prompt {PROMPT_TOKENS} tokens, decode {DECODE_TOKENS} tokens greedy, median of {RUNS} runs\n");

    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let shared =
        (switchyard_local_llm::forward::thread_pool(cores).expect("thread pool"), Arc::new(AtomicUsize::new(0)));
    let configurations = [
        ("1 thread", Threads::Fixed(1)),
        ("2 threads", Threads::Fixed(2)),
        ("adaptive (default)", Threads::Adaptive(&shared)),
    ];
    let mut rows = Vec::new();
    for (name, threads) in configurations {
        let runs: Vec<Run> = (0..RUNS)
            .map(|_| {
                shared.1.fetch_add(1, Ordering::Relaxed);
                let run = ours(&model, &prompt, threads);
                shared.1.fetch_sub(1, Ordering::Relaxed);
                run
            })
            .collect();
        rows.push((format!("ours, 1 stream, {name}"), summarize(&runs)));
    }
    for (name, threads) in configurations {
        // Two streams side by side; figures per stream (the aggregate is twice the decode).
        let mut per_stream = Vec::new();
        for _ in 0..RUNS {
            shared.1.fetch_add(2, Ordering::Relaxed);
            let results: Vec<Run> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..2).map(|_| scope.spawn(|| ours(&model, &prompt, threads))).collect();
                handles.into_iter().map(|h| h.join().expect("stream")).collect()
            });
            shared.1.fetch_sub(2, Ordering::Relaxed);
            per_stream.extend(results);
        }
        rows.push((format!("ours, 2 streams, {name}, per stream"), summarize(&per_stream)));
    }
    let candle_runs: Vec<Run> = (0..3).map(|_| candle(&model, &prompt)).collect();
    let baseline = summarize(&candle_runs);
    rows.push(("candle quantized_llama, 1 stream (rayon, all cores)".to_owned(), baseline));

    println!("{:<56} {:>12} {:>12} {:>16}", "", "prefill ms", "decode tok/s", "vs candle");
    for (name, (prefill, decode)) in &rows {
        println!(
            "{name:<56} {prefill:>12.1} {decode:>12.1} {:>16}",
            format!("{:.1}x / {:.1}x", baseline.0 / prefill, decode / baseline.1)
        );
    }

    let buffer: Vec<u64> = (0..(1u64 << 27)).collect(); // 1 GiB
    let bytes = model.bytes_per_token();
    println!("\nweights read per decoded token: {:.1} MB", bytes as f64 / 1e6);
    for threads in [1, 2] {
        let gbps = bandwidth(&buffer, threads);
        println!(
            "read bandwidth, {threads} thread(s): {gbps:.1} GB/s -> decode ceiling {:.0} tokens/s",
            gbps * 1e9 / bytes as f64
        );
    }
}
