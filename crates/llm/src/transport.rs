//! The HTTP side every provider shares: one `reqwest` client per provider, a timeout on each
//! attempt, retries with jittered exponential backoff that honour `Retry-After`, and errors that
//! name the provider and the cause but never the key.

use std::{
    future::Future,
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use reqwest::{
    Response, StatusCode,
    header::{HeaderMap, HeaderValue},
};
use switchyard_kit::{backoff::Backoff, log::Throttle};

use crate::{ErrorKind, ProviderConfig, ProviderError};

/// Longest vendor error text kept in an error message (some proxies answer with whole pages).
const MAX_CAUSE_CHARS: usize = 300;

pub(crate) struct Transport {
    provider: String,
    client: reqwest::Client,
    config: ProviderConfig,
}

impl Transport {
    pub fn new(provider: &str, config: ProviderConfig) -> Result<Self, ProviderError> {
        // reqwest is built without a bundled crypto provider; ring is the workspace's one.
        switchyard_kit::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            // Streamed requests are small and latency is what matters (reqwest's default too).
            .tcp_nodelay(true)
            .user_agent(concat!("switchyard-llm/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| {
                ProviderError::new(
                    provider,
                    ErrorKind::Connect,
                    format!("cannot build the HTTP client: {}", describe(err)),
                )
            })?;
        Ok(Self { provider: provider.to_owned(), client, config })
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// A header carrying the key, marked sensitive so no `Debug` of the request shows it.
    pub fn secret_header(value: &str) -> Result<HeaderValue, String> {
        let mut header = HeaderValue::from_str(value).map_err(|_| "the API key is not a valid HTTP header value")?;
        header.set_sensitive(true);
        Ok(header)
    }

    /// A non-streaming call: each attempt sends the request and reads the whole body. Returns
    /// the body and how many attempts it took.
    pub async fn post_for_body(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<(Bytes, u32), ProviderError> {
        self.with_retries(|| async {
            let response = self.send(url, headers, body.clone()).await?;
            match tokio::time::timeout(self.config.timeout, response.bytes()).await {
                Err(_) => Err(self.error(
                    ErrorKind::Timeout,
                    format!("the response body did not arrive within {:?}", self.config.timeout),
                )),
                Ok(Err(err)) => Err(self.request_failed(err)),
                Ok(Ok(body)) => Ok(body),
            }
        })
        .await
    }

    /// A streaming call: retried until the vendor accepts the request (2xx headers). From then
    /// on the body belongs to the caller and nothing is retried: text may have been shown.
    pub async fn post_for_stream(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<(Response, u32), ProviderError> {
        self.with_retries(|| self.send(url, headers, body.clone())).await
    }

    async fn send(&self, url: &str, headers: &HeaderMap, body: Bytes) -> Result<Response, ProviderError> {
        let request = self.client.post(url).headers(headers.clone()).body(body);
        let response = match tokio::time::timeout(self.config.timeout, request.send()).await {
            Err(_) => {
                return Err(self.error(ErrorKind::Timeout, format!("no response within {:?}", self.config.timeout)));
            }
            Ok(Err(err)) => return Err(self.request_failed(err)),
            Ok(Ok(response)) => response,
        };
        if response.status().is_success() { Ok(response) } else { Err(self.status_error(response).await) }
    }

    async fn with_retries<T, F, Fut>(&self, mut attempt: F) -> Result<(T, u32), ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mut backoff = Backoff::new(self.config.backoff_initial, self.config.backoff_max);
        let mut attempts: u32 = 0;
        loop {
            attempts = attempts.saturating_add(1);
            let mut error = match attempt().await {
                Ok(value) => return Ok((value, attempts)),
                Err(error) => error,
            };
            if !error.kind.is_retryable() || attempts > self.config.max_retries {
                return Err(gave_up(error, attempts));
            }
            let delay = match error.retry_after {
                Some(asked) if asked > self.config.max_retry_after => {
                    error.message.push_str(&format!(
                        "; asked to retry after {:?}, longer than the {:?} we wait",
                        asked, self.config.max_retry_after
                    ));
                    return Err(gave_up(error, attempts));
                }
                Some(asked) => asked,
                None => backoff.next_delay(),
            };
            static RETRYING: Throttle = Throttle::new();
            if let Some(suppressed) = RETRYING.admit(&self.provider) {
                tracing::warn!(provider = %self.provider, attempt = attempts, ?delay, cause = %error.message, suppressed, "LLM call failed; retrying");
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// A non-2xx answer: its status, `Retry-After` and the vendor's own message.
    async fn status_error(&self, response: Response) -> ProviderError {
        let status = response.status();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let body = match tokio::time::timeout(self.config.timeout, response.bytes()).await {
            Ok(Ok(body)) => body,
            _ => Bytes::new(),
        };
        let cause =
            vendor_message(&body).unwrap_or_else(|| status.canonical_reason().unwrap_or("no reason given").to_owned());
        let mut error = self.error(kind_of(status), format!("HTTP {}: {cause}", status.as_u16()));
        error.status = Some(status.as_u16());
        error.retry_after = retry_after;
        error
    }

    pub fn request_failed(&self, err: reqwest::Error) -> ProviderError {
        let kind = if err.is_timeout() { ErrorKind::Timeout } else { ErrorKind::Connect };
        self.error(kind, format!("request failed: {}", describe(err)))
    }

    /// An error of this provider, with the key scrubbed from the message should a vendor (or a
    /// proxy) have echoed it back.
    pub fn error(&self, kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(self.provider.clone(), kind, self.redact(message.into()))
    }

    pub fn redact(&self, message: String) -> String {
        redact(&self.config, message)
    }
}

pub(crate) fn redact(config: &ProviderConfig, message: String) -> String {
    match &config.api_key {
        Some(key) if !key.expose().is_empty() && message.contains(key.expose()) => {
            message.replace(key.expose(), "[redacted]")
        }
        _ => message,
    }
}

fn gave_up(mut error: ProviderError, attempts: u32) -> ProviderError {
    if attempts > 1 {
        error.message.push_str(&format!(" (gave up after {attempts} attempts)"));
    }
    error
}

fn kind_of(status: StatusCode) -> ErrorKind {
    match status.as_u16() {
        401 | 403 => ErrorKind::Auth,
        408 => ErrorKind::Timeout,
        429 => ErrorKind::RateLimited,
        // 529 is Anthropic's "overloaded", inside the 5xx range like every server failure.
        500..=599 => ErrorKind::Server,
        400..=499 => ErrorKind::Rejected,
        _ => ErrorKind::Protocol,
    }
}

/// A reqwest error in words, without the URL (which could carry credentials) and with its causes.
fn describe(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The vendor's error message: `error.message` (OpenAI, Anthropic), a bare `error` string
/// (Ollama), `message` or `detail` (FastAPI-based servers such as vLLM); else the body's text.
fn vendor_message(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let candidates = [&value["error"]["message"], &value["error"], &value["message"], &value["detail"]];
        if let Some(message) = candidates.iter().find_map(|candidate| candidate.as_str()) {
            return Some(truncate(message.trim()));
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| truncate(text))
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_CAUSE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// How long the vendor asked us to wait: `retry-after-ms` (OpenAI's finer hint) or
/// `Retry-After` as seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    let millis = header("retry-after-ms").and_then(|value| value.parse::<f64>().ok());
    if let Some(wait) = millis.and_then(|millis| Duration::try_from_secs_f64(millis / 1000.0).ok()) {
        return Some(wait);
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "2")]), now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(&headers(&[("retry-after", "0.5")]), now), Some(Duration::from_millis(500)));
        let in_ten = httpdate::fmt_http_date(now + Duration::from_secs(10));
        assert_eq!(retry_after(&headers(&[("retry-after", &in_ten)]), now), Some(Duration::from_secs(10)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(10));
        assert_eq!(retry_after(&headers(&[("retry-after", &past)]), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "1e300")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn vendor_messages_are_found_in_each_shape() {
        assert_eq!(vendor_message(br#"{"error":{"message":"bad key","type":"x"}}"#).as_deref(), Some("bad key"));
        assert_eq!(
            vendor_message(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
                .as_deref(),
            Some("Overloaded")
        );
        assert_eq!(vendor_message(br#"{"error":"model not found"}"#).as_deref(), Some("model not found"));
        assert_eq!(vendor_message(br#"{"detail":"nope"}"#).as_deref(), Some("nope"));
        assert_eq!(vendor_message(b"upstream down\n").as_deref(), Some("upstream down"));
        assert_eq!(vendor_message(b"").as_deref(), None);
        let long = "x".repeat(1000);
        assert_eq!(vendor_message(long.as_bytes()).map(|m| m.chars().count()), Some(MAX_CAUSE_CHARS + 1));
    }

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(kind_of(StatusCode::UNAUTHORIZED), ErrorKind::Auth);
        assert_eq!(kind_of(StatusCode::FORBIDDEN), ErrorKind::Auth);
        assert_eq!(kind_of(StatusCode::TOO_MANY_REQUESTS), ErrorKind::RateLimited);
        assert_eq!(kind_of(StatusCode::from_u16(529).unwrap()), ErrorKind::Server);
        assert_eq!(kind_of(StatusCode::BAD_GATEWAY), ErrorKind::Server);
        assert_eq!(kind_of(StatusCode::NOT_FOUND), ErrorKind::Rejected);
    }
}
