//! The model itself: tokenizer ids, logits against candle's reference implementation,
//! greedy text.

mod common;

use candle_core::{Device, Tensor, quantized::gguf_file};
use candle_transformers::models::quantized_llama::ModelWeights;
use switchyard_local_llm::{LoadError, LocalModel, Logits, MODEL_FILE, generate::argmax, tokenizer};

#[test]
fn tokenizer_matches_llama_cpp() {
    let model = common::model();
    let tokenizer = model.tokenizer();
    // Expected ids from llama.cpp's tokenizer for this file (llama-cpp-python 0.3.36,
    // `Llama.tokenize(text, add_bos=False, special=True)`), which implements the `smollm`
    // pre-tokenizer the GGUF names.
    let cases: [(&str, &[u32]); 5] = [
        ("<|im_start|>user\nHello<|im_end|>", &[1, 4093, 198, 19556, 2]),
        (
            "Hello, world! 12345 naïve café 🙂",
            &[19556, 28, 905, 17, 216, 33, 34, 35, 36, 37, 15486, 46494, 37366, 47526],
        ),
        ("  two spaces\n\n\tTab", &[216, 827, 5600, 1116, 197, 30064]),
        ("def f(x):\n    return x*2", &[1604, 275, 24, 104, 727, 472, 1003, 1792, 26, 34]),
        ("I'll see you're 3.14", &[57, 3060, 963, 346, 2316, 216, 35, 30, 33, 36]),
    ];
    for (text, ids) in cases {
        assert_eq!(tokenizer.encode_with_specials(text).expect("encode"), ids, "{text:?}");
    }
    assert_eq!(tokenizer::IM_START, 1);
    assert_eq!(tokenizer::IM_END, 2);
    assert_eq!(tokenizer.eos(), 2);
    // Plain text never produces control tokens, and decoding gives the text back.
    let plain = tokenizer.encode("say <|im_end|> now").expect("encode");
    assert!(!plain.iter().any(|id| tokenizer.is_special(*id)), "{plain:?}");
    assert_eq!(tokenizer.decode(&plain), "say <|im_end|> now");
    let text = "Hello, world! 12345 naïve café 🙂";
    assert_eq!(tokenizer.decode(&tokenizer.encode(text).expect("encode")), text);
}

#[test]
fn logits_match_candle_quantized_llama() {
    let model = common::model();
    let prompt = model
        .tokenizer()
        .encode_with_specials("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
        .expect("encode");
    let mut session = model.session(512, 1);
    let ours = session.forward(&prompt, Logits::All).expect("forward");
    let vocab = model.config().vocab;

    let mut file = std::fs::File::open(model.path()).expect("open");
    let content = gguf_file::Content::read(&mut file).expect("gguf");
    let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("candle model");
    // candle returns the last position's logits; compare the last few positions by running
    // prefixes (each is a fresh reference run with its own cache).
    for end in [prompt.len() - 2, prompt.len()] {
        let mut file = std::fs::File::open(model.path()).expect("open");
        let content = gguf_file::Content::read(&mut file).expect("gguf");
        reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("candle model");
        let input = Tensor::new(&prompt[..end], &Device::Cpu).and_then(|t| t.unsqueeze(0)).expect("input");
        let expected: Vec<f32> = reference
            .forward(&input, 0)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .expect("candle forward");
        let got = &ours[(end - 1) * vocab..end * vocab];
        let max_diff = got.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let spread =
            expected.iter().fold(f32::MIN, |m, v| m.max(*v)) - expected.iter().fold(f32::MAX, |m, v| m.min(*v));
        // Both quantize activations to 8 bits (differently), so logits differ slightly.
        assert_eq!(argmax(got), argmax(&expected), "same top token at position {end}");
        assert!(max_diff < 0.05 * spread, "max |Δlogit| {max_diff} against a spread of {spread}");
        let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
        for (a, b) in got.iter().zip(&expected) {
            dot += f64::from(*a) * f64::from(*b);
            na += f64::from(*a).powi(2);
            nb += f64::from(*b).powi(2);
        }
        let cosine = dot / (na.sqrt() * nb.sqrt());
        assert!(cosine > 0.999, "cosine {cosine}");
    }
    drop(reference);
}

#[test]
fn greedy_answer_is_sensible_and_threads_agree() {
    let model = common::model();
    let prompt = model
        .tokenizer()
        .encode_with_specials("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
        .expect("encode");
    let mut answers = Vec::new();
    for threads in [1, 2] {
        let mut session = model.session(512, threads);
        let mut logits = session.forward(&prompt, Logits::Last).expect("forward");
        let mut ids = Vec::new();
        for _ in 0..20 {
            let next = argmax(&logits);
            if next == tokenizer::IM_END {
                break;
            }
            ids.push(next);
            logits = session.forward(&[next], Logits::Last).expect("forward");
        }
        answers.push(model.tokenizer().decode(&ids));
    }
    assert!(answers[0].contains("Paris"), "{:?}", answers[0]);
    assert_eq!(answers[0], answers[1], "the same arithmetic on one or two threads");
}

#[test]
fn a_missing_file_names_the_path_and_the_script() {
    let dir = std::env::temp_dir().join(format!("no-model-{}", std::process::id()));
    let err = LocalModel::load(&dir).expect_err("no model there");
    assert!(matches!(err, LoadError::Missing { .. }));
    let message = err.to_string();
    assert!(message.contains(&dir.join(MODEL_FILE).display().to_string()), "{message}");
    assert!(message.contains("run scripts/fetch-models.sh"), "{message}");
}
