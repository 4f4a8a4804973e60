//! The real all-MiniLM-L6-v2 (fetched by `scripts/fetch-models.sh`; `SWITCHYARD_MODEL_DIR`
//! overrides the folder). The test fails, never skips, when the model is missing.

use switchyard_models::{DenseKernels, Embedder, Simd, cosine};
use switchyard_testkit::model_dir;

/// An embedder whose single texts run in f32 (our kernels at the best level), so a text alone
/// and in a batch must agree to rounding.
fn f32_embedder() -> Embedder {
    Embedder::load_with(&model_dir(), DenseKernels::F32(Simd::detect()))
        .expect("model present: run scripts/fetch-models.sh")
}

#[test]
fn embeddings_are_unit_length_batch_independent_and_semantic() {
    let embedder = f32_embedder();
    assert_eq!(embedder.dimensions(), 384);
    let texts =
        ["How do I book a cheap flight to Rome?", "Search and compare airline tickets.", "A chocolate cake recipe"];
    let batch = embedder.embed(&texts).expect("embed");
    assert_eq!(batch.len(), 3);
    for vector in &batch {
        assert_eq!(vector.len(), 384);
        assert!((cosine(vector, vector) - 1.0).abs() < 1e-4, "unit length");
    }
    let alone = embedder.embed(&texts[..1]).expect("embed one");
    assert!(cosine(&alone[0], &batch[0]) > 0.9999, "padding in a batch does not change an embedding");
    let (flight, cake) = (cosine(&batch[0], &batch[1]), cosine(&batch[0], &batch[2]));
    assert!(flight > cake + 0.2, "the flight question is nearer airline tickets ({flight}) than cake ({cake})");
    assert!(embedder.embed(&[]).expect("empty").is_empty());
}

#[test]
fn batches_of_mixed_lengths_keep_their_order_and_values() {
    let embedder = f32_embedder();
    // Long and short texts interleaved: the embedder regroups them by length (and runs short
    // calls on its column-major copy), which must change neither order nor values.
    let texts = [
        "Search and compare airline tickets across hundreds of airlines and travel agencies, with price alerts.",
        "hi",
        "A chocolate cake recipe",
        "Real-time stock quotes, historical prices, company fundamentals, earnings calendars and analyst ratings.",
        "weather",
    ];
    let batch = embedder.embed(&texts).expect("embed");
    for (text, vector) in texts.iter().zip(&batch) {
        let alone = embedder.embed(&[text]).expect("embed one");
        assert!(cosine(&alone[0], vector) > 0.9999, "{text}: batched and alone differ");
    }
}

#[test]
fn a_missing_model_folder_says_how_to_get_it() {
    let err = Embedder::load(std::path::Path::new("/nonexistent")).err().expect("fails");
    assert!(err.to_string().contains("scripts/fetch-models.sh"), "{err}");
}

#[test]
fn the_model_digest_is_that_of_the_folder_the_model_was_loaded_from_and_read_once() {
    let copy = std::env::temp_dir().join(format!("switchyard-digest-{}", std::process::id()));
    std::fs::create_dir_all(&copy).expect("temp dir");
    for name in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(model_dir().join(name), copy.join(name)).expect("copy the model");
    }
    let embedder = Embedder::load_with(&copy, DenseKernels::F32(Simd::detect())).expect("the copied model loads");
    let digest = embedder.model_digest().expect("the model's files are readable");
    // The same files in another folder are the same model.
    assert_eq!(digest, switchyard_models::cache_file::ModelDigest::of_dir(&model_dir()).expect("digest"));
    // Kept: asked again after its files are gone, it is still there (not read again).
    std::fs::remove_dir_all(&copy).expect("remove the copy");
    assert_eq!(embedder.model_digest().expect("kept"), digest);
}
