//! What the gateway sends to one upstream HTTP server to be let in: the server's configured
//! headers (read again on every connection and after a `401`, so a rotated secret file applies
//! without a restart) and, for a server with `oauth`, a bearer token the gateway gets with the
//! client-credentials grant (RFC 6749 §4.4), keeps until shortly before it expires, and fetches
//! again once when the server refuses it.
//!
//! Each server has its own [`Credentials`]: nothing here is ever sent to another server, and
//! neither the gateway's own clients' credentials nor any other server's reach it. Secrets
//! never appear in logs or errors — only where they are read from.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use base64::Engine;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::ClientJsonRpcMessage,
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    },
};
use serde::Deserialize;
use sse_stream::Sse;
use switchyard_kit::backoff::Backoff;

use super::config::{ClientAuth, ConfigValue, OAuthClient};

/// Longest a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// The most of a token's life given up to refresh it early (a tenth of its life, up to this).
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Longest a token endpoint's error description kept in an error message.
const MAX_DESCRIPTION: usize = 200;

/// One server's credentials.
pub struct Credentials {
    server: String,
    headers: BTreeMap<String, ConfigValue>,
    /// The headers as last read.
    current: Mutex<HashMap<HeaderName, HeaderValue>>,
    oauth: Option<TokenSource>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("headers", &self.headers)
            .field("oauth", &self.oauth.as_ref().map(|o| &o.client))
            .finish_non_exhaustive()
    }
}

impl Credentials {
    pub fn new(server: &str, headers: BTreeMap<String, ConfigValue>, oauth: Option<OAuthClient>) -> Self {
        let current = headers.iter().filter_map(|(name, value)| header(name, value.expose()).ok()).collect();
        Self {
            server: server.to_owned(),
            headers,
            current: Mutex::new(current),
            oauth: oauth.map(|client| TokenSource::new(server, client)),
        }
    }

    /// Reads the configured headers again (before each connection, and after a `401`).
    pub fn reread(&self) -> Result<(), String> {
        let mut fresh = HashMap::new();
        for (name, value) in &self.headers {
            let text = value.reread(&format!("headers.{name}"))?;
            let (name, value) = header(name, &text).map_err(|why| format!("`headers.{name}`: {why}"))?;
            fresh.insert(name, value);
        }
        *self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
        Ok(())
    }

    /// What to send with one request: the bearer token (when the server has `oauth`) and the
    /// configured headers added to `headers`.
    async fn prepare(
        &self,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(Option<String>, HashMap<HeaderName, HeaderValue>), String> {
        let token = match &self.oauth {
            Some(source) => Some(source.token().await?),
            None => None,
        };
        let current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (name, value) in current.iter() {
            headers.insert(name.clone(), value.clone());
        }
        Ok((token, headers))
    }

    /// The server answered `401` to what [`Self::prepare`] gave: forget the token that was used
    /// and read the headers again. Whether trying once more could change anything.
    async fn refused(&self, token: Option<&str>) -> bool {
        let mut changed = false;
        if let Some(source) = &self.oauth {
            source.forget(token).await;
            changed = true;
        }
        if self.headers.values().any(ConfigValue::is_secret) {
            let before = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
            match self.reread() {
                Ok(()) => {
                    changed |= *self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) != before;
                }
                Err(why) => tracing::warn!(server = %self.server, error = %why, "reading the server's headers again"),
            }
        }
        changed
    }

    /// How many tokens were fetched (for the metrics and the tests' logs).
    pub fn tokens_fetched(&self) -> u64 {
        self.oauth.as_ref().map_or(0, |source| source.fetched.load(Ordering::Relaxed))
    }
}

fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::try_from(name).map_err(|_| "not a valid header name".to_owned())?;
    let mut value = HeaderValue::try_from(value).map_err(|_| "a value that is not valid in a header".to_owned())?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// A token as fetched.
struct Token {
    value: String,
    /// When to fetch the next one; `None` when the endpoint gave no lifetime (then it is used
    /// until the server refuses it).
    refresh_at: Option<Instant>,
}

#[derive(Default)]
struct TokenState {
    token: Option<Token>,
    failures: u32,
    /// After a failed fetch: no new request before this, the same error until then.
    retry_at: Option<(Instant, String)>,
}

struct TokenSource {
    server: String,
    client: OAuthClient,
    http: reqwest::Client,
    /// One fetch at a time: concurrent calls wait for it and share its token.
    state: tokio::sync::Mutex<TokenState>,
    backoff: Backoff,
    fetched: AtomicU64,
}

/// A token endpoint's answer (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    token_type: String,
    expires_in: Option<u64>,
}

/// A token endpoint's error (RFC 6749 §5.2).
#[derive(Deserialize)]
struct TokenError {
    error: String,
    error_description: Option<String>,
}

impl TokenSource {
    fn new(server: &str, client: OAuthClient) -> Self {
        let http = reqwest::Client::builder()
            .timeout(TOKEN_TIMEOUT)
            // The client secret goes to the configured endpoint and nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            server: server.to_owned(),
            client,
            http,
            state: tokio::sync::Mutex::default(),
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(60)),
            fetched: AtomicU64::new(0),
        }
    }

    /// A token that is not about to expire: the cached one, or a new one.
    async fn token(&self) -> Result<String, String> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(token) = &state.token
            && token.refresh_at.is_none_or(|at| now < at)
        {
            return Ok(token.value.clone());
        }
        if let Some((at, why)) = &state.retry_at
            && now < *at
        {
            return Err(format!("{why} (next try in {} ms)", at.duration_since(now).as_millis()));
        }
        match self.fetch().await {
            Ok(token) => {
                let value = token.value.clone();
                state.token = Some(token);
                state.failures = 0;
                state.retry_at = None;
                Ok(value)
            }
            Err(why) => {
                let delay = self.backoff.delay(state.failures);
                state.failures = state.failures.saturating_add(1);
                tracing::warn!(server = %self.server, token_url = %self.client.token_url, error = %why, retry_in_ms = delay.as_millis() as u64, "fetching the server's access token failed");
                state.token = None;
                state.retry_at = Some((Instant::now() + delay, why.clone()));
                Err(why)
            }
        }
    }

    /// The server refused `used`: unless another call has fetched a new one since, the next
    /// call fetches a new one.
    async fn forget(&self, used: Option<&str>) {
        let mut state = self.state.lock().await;
        if state.token.as_ref().is_some_and(|token| Some(token.value.as_str()) == used) {
            state.token = None;
            // A refused token is not the endpoint's failure: fetch again right away.
            state.retry_at = None;
        }
    }

    async fn fetch(&self) -> Result<Token, String> {
        let client = &self.client;
        let secret = client.client_secret.reread("oauth.client_secret")?;
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = &client.scope {
            form.push(("scope", scope.as_str()));
        }
        if let Some(audience) = &client.audience {
            form.push(("audience", audience.as_str()));
        }
        let mut request = self.http.post(&client.token_url).header(http::header::ACCEPT, "application/json");
        match client.client_auth {
            ClientAuth::Basic => {
                // RFC 6749 §2.3.1: both form-encoded before they are joined.
                let pair = format!("{}:{}", form_encode(&client.client_id), form_encode(&secret));
                let mut value =
                    HeaderValue::try_from(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
                        .map_err(|_| "the client id or secret cannot be sent in a header".to_owned())?;
                value.set_sensitive(true);
                request = request.header(http::header::AUTHORIZATION, value);
            }
            ClientAuth::Body => {
                form.push(("client_id", client.client_id.as_str()));
                form.push(("client_secret", secret.as_str()));
            }
        }
        let started = Instant::now();
        let body: Vec<String> = form.iter().map(|(key, value)| format!("{key}={}", form_encode(value))).collect();
        let request =
            request.header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body.join("&"));
        let response = request
            .send()
            .await
            .map_err(|err| format!("token endpoint {} unreachable: {}", client.token_url, without_url(&err)))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|err| {
            format!("token endpoint {} answered {status}, then: {}", client.token_url, without_url(&err))
        })?;
        if !status.is_success() {
            let detail = match serde_json::from_slice::<TokenError>(&body) {
                Ok(TokenError { error, error_description: Some(description) }) => {
                    format!(": {} ({})", clip(&error), clip(&description))
                }
                Ok(TokenError { error, error_description: None }) => format!(": {}", clip(&error)),
                Err(_) => String::new(),
            };
            return Err(format!("token endpoint {} answered {status}{detail}", client.token_url));
        }
        let answer: TokenResponse = serde_json::from_slice(&body)
            .map_err(|err| format!("token endpoint {} answered without a usable token: {err}", client.token_url))?;
        if !answer.token_type.eq_ignore_ascii_case("bearer") {
            return Err(format!(
                "token endpoint {} issued a `{}` token; only bearer tokens are supported",
                client.token_url,
                clip(&answer.token_type)
            ));
        }
        if answer.access_token.is_empty() || HeaderValue::try_from(format!("Bearer {}", answer.access_token)).is_err() {
            return Err(format!("token endpoint {} issued a token that cannot be sent in a header", client.token_url));
        }
        let lifetime = answer.expires_in.map(Duration::from_secs);
        let refresh_at = lifetime.map(|life| started + life - (life / 10).min(MAX_REFRESH_MARGIN));
        self.fetched.fetch_add(1, Ordering::Relaxed);
        tracing::info!(server = %self.server, token_url = %client.token_url, expires_in = answer.expires_in, "access token fetched");
        Ok(Token { value: answer.access_token, refresh_at })
    }
}

/// A reqwest error's text without its URL (the token URL is in the message already, and a URL
/// may carry a key in its query).
fn without_url(err: &reqwest::Error) -> String {
    let mut err = err.to_string();
    if let Some(start) = err.find(" for url (") {
        err.truncate(start);
    }
    err
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(char::from(byte)),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn clip(text: &str) -> String {
    let text: String = text.chars().filter(|c| !c.is_control()).take(MAX_DESCRIPTION).collect();
    text
}

/// The HTTP client the streamable HTTP transport uses for one server: every request carries
/// the server's [`Credentials`], and a request the server refuses with `401` is sent once more
/// with fresh ones (a new token, headers read again) when that could change the answer.
#[derive(Clone)]
pub(super) struct AuthorizedClient {
    http: reqwest::Client,
    credentials: Arc<Credentials>,
}

impl AuthorizedClient {
    pub(super) fn new(credentials: Arc<Credentials>) -> Self {
        let http = reqwest::Client::builder()
            // Headers and tokens are meant for this server's URL, not wherever it redirects.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { http, credentials }
    }

    async fn send<T, F, Fut>(
        &self,
        headers: HashMap<HeaderName, HeaderValue>,
        auth: Option<String>,
        send: F,
    ) -> Answer<T>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Answer<T>>,
    {
        let unusable = |why: String| {
            StreamableHttpError::UnexpectedServerResponse(
                format!("no credentials for server `{}`: {why}", self.credentials.server).into(),
            )
        };
        let (token, prepared) = self.credentials.prepare(headers.clone()).await.map_err(unusable)?;
        let answer = send(token.clone().or_else(|| auth.clone()), prepared).await;
        match answer {
            Err(err) if refused(&err) => {
                if !self.credentials.refused(token.as_deref()).await {
                    return Err(err);
                }
                tracing::info!(server = %self.credentials.server, "the server refused the gateway's credentials; trying once more with fresh ones");
                let (token, prepared) = self.credentials.prepare(headers).await.map_err(unusable)?;
                send(token.or(auth), prepared).await
            }
            other => other,
        }
    }
}

/// Whether the server answered `401` (with or without a challenge).
fn refused(err: &StreamableHttpError<reqwest::Error>) -> bool {
    match err {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::Client(err) => err.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        StreamableHttpError::UnexpectedServerResponse(text) => text.starts_with("HTTP 401"),
        _ => false,
    }
}

/// What the transport's client methods answer.
type Answer<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for AuthorizedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<StreamableHttpPostResponse> {
        self.send(headers, auth, |auth, headers| {
            self.http.post_message(uri.clone(), message.clone(), session_id.clone(), auth, headers)
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Answer<StreamableHttpPostResponse> {
        self.send(headers, auth, |auth, headers| {
            self.http.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                headers,
                max_sse_event_size,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<()> {
        self.send(headers, auth, |auth, headers| {
            self.http.delete_session(uri.clone(), session_id.clone(), auth, headers)
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<BoxStream<'static, Result<Sse, SseError>>> {
        self.send(headers, auth, |auth, headers| {
            self.http.get_stream(uri.clone(), session_id.clone(), last_event_id.clone(), auth, headers)
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Answer<BoxStream<'static, Result<Sse, SseError>>> {
        self.send(headers, auth, |auth, headers| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth,
                headers,
                max_sse_event_size,
            )
        })
        .await
    }
}
