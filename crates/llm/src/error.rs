//! Provider errors: they name the provider and the cause, and never carry a key.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect, or the connection broke before the answer was complete.
    Connect,
    /// No answer (or no next chunk) within the provider's timeout.
    Timeout,
    /// 429: rate limited; `retry_after` says when the vendor asked us to come back.
    RateLimited,
    /// 5xx (and 529 overloaded).
    Server,
    /// 401/403: the key is missing or refused.
    Auth,
    /// Other 4xx: the request was refused as malformed (a bug or an unknown model).
    Rejected,
    /// The answer was not in the wire format we expect.
    Protocol,
    /// No provider is configured under the model's provider name.
    NotConfigured,
    /// The request asks for what this provider or wire cannot do (images for a text-only
    /// model, a malformed image URL, tools it cannot call): the caller's mistake, refused
    /// before any call, with [`ProviderError::field`] naming what to change.
    Unsupported,
    /// The provider's circuit is open after repeated failures: refused at once, without a
    /// call, so the fallback walk moves on; the message says when the provider is probed again.
    CircuitOpen,
    /// Every deployment of the provider (its keys or base URLs) is cooling down after failures:
    /// refused at once, without a call, so the fallback walk moves on.
    Cooling,
}

impl ErrorKind {
    /// Worth retrying against the same provider (429, 5xx, connection errors, timeouts).
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Connect | Self::Timeout | Self::RateLimited | Self::Server)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct ProviderError {
    /// `openai`, `anthropic`, ….
    pub provider: String,
    pub kind: ErrorKind,
    /// HTTP status when there was one.
    pub status: Option<u16>,
    /// The cause in words (the vendor's error message when it gave one); never a key.
    pub message: String,
    /// `Retry-After` as the vendor sent it.
    pub retry_after: Option<Duration>,
    /// For [`ErrorKind::Unsupported`]: the request field at fault, in the request's terms
    /// (`messages[1].parts[0]`, `tools`, `response_format`).
    pub field: Option<String>,
}

impl ProviderError {
    pub fn new(provider: impl Into<String>, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { provider: provider.into(), kind, status: None, message: message.into(), retry_after: None, field: None }
    }

    /// The request cannot be served as asked; `message` says why, naming `field`.
    pub fn unsupported(provider: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::new(provider, ErrorKind::Unsupported, message) }
    }
}
