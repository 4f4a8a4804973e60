#[derive(Debug, thiserror::Error)]
#[error("x")]
pub struct StoreError;
