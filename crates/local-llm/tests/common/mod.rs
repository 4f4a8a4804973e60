//! The real model (fetched by `scripts/fetch-models.sh`; `SWITCHYARD_MODELS_DIR` overrides
//! the models folder). A missing model fails the tests, never skips them.

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use switchyard_local_llm::{LocalModel, MODEL_DIR_NAME, MODEL_FILE};

pub fn model_dir() -> PathBuf {
    std::env::var_os("SWITCHYARD_MODELS_DIR")
        .map_or_else(|| switchyard_testkit::root().join("models"), PathBuf::from)
        .join(MODEL_DIR_NAME)
}

pub fn model() -> Arc<LocalModel> {
    static MODEL: OnceLock<Arc<LocalModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = model_dir();
            assert!(
                dir.join(MODEL_FILE).is_file(),
                "{} is missing: run scripts/fetch-models.sh (tests never skip)",
                dir.join(MODEL_FILE).display()
            );
            LocalModel::load(&dir).unwrap_or_else(|err| panic!("loading the local model: {err}"))
        })
        .clone()
}
