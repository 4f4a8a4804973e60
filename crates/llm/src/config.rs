//! How to reach one vendor: where, with which key, how long to wait and how often to retry.

use std::time::Duration;

use switchyard_kit::Secret;

/// One provider's connection settings. `Debug` is safe to log: the key prints as `[redacted]`.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The API root as the vendor's own SDK takes it: with `/v1` for OpenAI-compatible servers
    /// (`https://api.openai.com/v1`, `http://localhost:8000/v1` for vLLM), without it for
    /// Anthropic (`https://api.anthropic.com`).
    pub base_url: String,
    /// `None` for local servers that take no key.
    pub api_key: Option<Secret>,
    /// To establish the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// From sending the request until the response headers arrive. A non-streaming answer's
    /// headers come only once the model has finished, so this bounds the whole generation there.
    pub timeout: Duration,
    /// Longest silence between two pieces of a response body (between stream chunks).
    pub idle_timeout: Duration,
    /// Retries after the first attempt, for 429, 5xx, connection errors and timeouts.
    pub max_retries: u32,
    /// A `Retry-After` longer than this is not waited out: the call fails at once so the caller
    /// can fall back to another model instead of stalling.
    pub max_retry_after: Duration,
    /// First backoff delay when the vendor gave no `Retry-After`; it doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl ProviderConfig {
    /// Defaults: 60 s for headers and between chunks, 10 s to connect, 2 retries starting at
    /// 500 ms, `Retry-After` honoured up to 30 s.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_retries: 2,
            max_retry_after: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(8),
        }
    }

    pub fn with_api_key(mut self, key: Option<Secret>) -> Self {
        self.api_key = key;
        self
    }

    /// One timeout for everything (the `OPENAI_TIMEOUT` / `ANTHROPIC_TIMEOUT` setting): the
    /// response headers and the gap between chunks; connecting gets at most 10 s of it.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.idle_timeout = timeout;
        self.connect_timeout = timeout.min(Duration::from_secs(10));
        self
    }

    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// The base URL without a trailing `/`, so paths can be appended as `/chat/completions`.
    pub(crate) fn root(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
}
