//! The single-text encoder's kernels against candle's f32 encoder on the real
//! all-MiniLM-L6-v2 (`scripts/fetch-models.sh`): our f32 kernels must agree to rounding at
//! every SIMD level; int8 must stay close on texts of every kind. Fails, never skips, when the
//! model is missing.

use switchyard_models::{DenseKernels, Embedder, Simd, cosine};
use switchyard_testkit::model_dir;

/// Short and long, questions and statements, code, numbers, accents, CJK, emoji, and text past
/// the 256-token cut.
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "hi",
        "weather",
        "Can I find academic research papers about climate change?",
        "Turn this question into a SQL query",
        "convert 300 dollars to euros",
        "What should I wear today?",
        "plan a trip to Lisbon in May",
        "How do I fix a segfault in my Rust program that uses unsafe pointers?",
        "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 3;",
        "fn main() { println!(\"{}\", (1..=10).sum::<u32>()); }",
        "Wie wird das Wetter morgen in München? Brauche ich einen Regenschirm?",
        "¿Dónde está la estación de tren más cercana?",
        "東京で一番おいしいラーメン屋はどこですか",
        "Привет, как дела? Найди мне рецепт борща.",
        "🎉🎂 birthday party ideas for a 7 year old 🎈",
        "e = mc², ∫₀^∞ e^(−x²) dx = √π / 2",
        "RealEstate: Listings of homes for sale and rent, with neighbourhood data, school ratings and mortgage \
         estimates.",
        "I have a meeting with the finance team tomorrow at 10am and need a summary of last quarter's revenue, \
         the top three cost centres, a comparison with the same quarter last year, and a short list of questions \
         they are likely to ask about the hiring plan, the cloud bill and the delayed product launch.",
        "   spaced    out   text  ",
        "A",
    ]
    .iter()
    .map(|t| (*t).to_owned())
    .collect();
    texts.push("The quick brown fox jumps over the lazy dog. ".repeat(40));
    texts
}

fn load(kernels: DenseKernels) -> Embedder {
    Embedder::load_with(&model_dir(), kernels).expect("model present: run scripts/fetch-models.sh")
}

/// Cosines of each text embedded alone by `subject` and by `reference`.
fn cosines(subject: &Embedder, reference: &Embedder) -> Vec<(String, f32)> {
    texts()
        .into_iter()
        .map(|text| {
            let a = subject.embed(&[&text]).expect("embed");
            let b = reference.embed(&[&text]).expect("embed");
            let similarity = cosine(&a[0], &b[0]);
            (text, similarity)
        })
        .collect()
}

#[test]
fn f32_kernels_match_candle_at_every_level() {
    let reference = load(DenseKernels::Candle);
    for simd in [Simd::Scalar, Simd::detect()] {
        for (text, similarity) in cosines(&load(DenseKernels::F32(simd)), &reference) {
            assert!(similarity > 0.9999, "{simd:?} {text:?}: cosine {similarity}");
        }
    }
}

#[test]
fn int8_stays_close_to_f32_on_varied_texts() {
    let reference = load(DenseKernels::Candle);
    let int8 = load(DenseKernels::Int8(Simd::detect()));
    let measured = cosines(&int8, &reference);
    let lowest = measured.iter().map(|(_, c)| *c).fold(f32::MAX, f32::min);
    let mean = measured.iter().map(|(_, c)| *c).sum::<f32>() / measured.len() as f32;
    eprintln!("int8 against f32 over {} texts: lowest cosine {lowest:.5}, mean {mean:.5}", measured.len());
    for (text, similarity) in &measured {
        eprintln!("  {similarity:.5}  {:.60}", text.replace('\n', " "));
        assert!(*similarity >= FLOOR, "{text:?}: cosine {similarity}");
    }
    // Every level computes the same integer sums, so the same vectors.
    let scalar = load(DenseKernels::Int8(Simd::Scalar));
    for (text, similarity) in cosines(&scalar, &int8) {
        assert!(similarity > 0.99999, "{text:?}: int8 scalar and SIMD differ (cosine {similarity})");
    }
}

/// Just under the lowest cosine measured, 0.9886 for "hi" (mean 0.9969; BENCHMARKS.md,
/// "Embeddings").
const FLOOR: f32 = 0.985;
