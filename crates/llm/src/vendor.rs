//! What the two vendor APIs share: one JSON body POSTed to one URL with the vendor's headers,
//! the answer read whole or decoded from Server-Sent Events, through one [`Transport`] (its
//! timeouts and retries). Each API says only how a request is encoded and how answers are read
//! ([`Api`]); [`Vendor`] is the provider built from that. Each call is a GenAI span
//! (`telemetry`).

use std::{borrow::Cow, fmt, marker::PhantomData};

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tracing::Instrument;

use crate::{
    ChatRequest, Completion, ErrorKind, EventStream, Provider, ProviderConfig, ProviderError,
    streaming::{Decoder, event_stream},
    telemetry,
    transport::Transport,
};

/// One vendor's wire format. Public only so the provider types can name it; it cannot be
/// implemented outside this crate (the module is private).
pub trait Api: Send + Sync + 'static {
    /// The provider type's name, for `Debug`.
    const TYPE_NAME: &'static str;
    type Decoder: Decoder;

    /// The request body.
    fn encode(request: &ChatRequest, stream: bool) -> Result<Vec<u8>, EncodeError>;

    /// A whole (non-streaming) answer to `request`.
    fn parse_completion(request: &ChatRequest, body: &[u8]) -> Result<Completion, String>;

    /// Reads one streamed answer to `request`, made in `attempts` HTTP attempts.
    fn decoder(request: &ChatRequest, provider: &str, attempts: u32) -> Self::Decoder;

    /// Headers of this request beside the provider's own (replacing one of the same name).
    fn request_headers(_request: &ChatRequest) -> Result<Vec<(HeaderName, HeaderValue)>, EncodeError> {
        Ok(Vec::new())
    }
}

/// Why a request has no body in a vendor's format.
#[derive(Debug)]
pub enum EncodeError {
    /// The wire cannot carry what the request asks for: the caller's mistake, naming the field.
    Unsupported {
        field: String,
        message: String,
    },
    Json(serde_json::Error),
}

impl EncodeError {
    pub(crate) fn unsupported(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Unsupported { field: field.into(), message: message.into() }
    }
}

impl From<serde_json::Error> for EncodeError {
    fn from(err: serde_json::Error) -> Self {
        Self::Json(err)
    }
}

/// A provider speaking the wire format `A`.
pub struct Vendor<A> {
    transport: Transport,
    url: String,
    headers: HeaderMap,
    api: PhantomData<fn() -> A>,
}

impl<A: Api> fmt::Debug for Vendor<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(A::TYPE_NAME).field("name", &self.transport.provider()).field("url", &self.url).finish()
    }
}

impl<A: Api> Vendor<A> {
    /// `path` is appended to the configured root; `auth` is the header carrying the key (its
    /// value made from the key), sent marked sensitive; `extra` headers go with every request.
    pub(crate) fn build(
        name: &str,
        config: ProviderConfig,
        path: &str,
        auth: (HeaderName, fn(&str) -> String),
        extra: &[(HeaderName, &'static str)],
    ) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (header, value) in extra {
            headers.insert(header.clone(), HeaderValue::from_static(value));
        }
        if let Some(key) = &config.api_key {
            let (header, value_of) = auth;
            let value = Transport::secret_header(&value_of(key.expose()))
                .map_err(|message| ProviderError::new(name, ErrorKind::Auth, message))?;
            headers.insert(header, value);
        }
        let url = format!("{}{path}", config.root());
        Ok(Self { transport: Transport::new(name, config)?, url, headers, api: PhantomData })
    }

    fn body(&self, request: &ChatRequest, stream: bool) -> Result<Bytes, ProviderError> {
        A::encode(request, stream).map(Bytes::from).map_err(|err| self.encode_error(err))
    }

    /// The provider's headers with the request's own over them.
    fn headers(&self, request: &ChatRequest) -> Result<Cow<'_, HeaderMap>, ProviderError> {
        let extra = A::request_headers(request).map_err(|err| self.encode_error(err))?;
        if extra.is_empty() {
            return Ok(Cow::Borrowed(&self.headers));
        }
        let mut headers = self.headers.clone();
        for (name, value) in extra {
            headers.insert(name, value);
        }
        Ok(Cow::Owned(headers))
    }

    fn encode_error(&self, err: EncodeError) -> ProviderError {
        match err {
            EncodeError::Unsupported { field, message } => {
                ProviderError::unsupported(self.transport.provider(), field, message)
            }
            EncodeError::Json(err) => {
                self.transport.error(ErrorKind::Rejected, format!("the request cannot be encoded: {err}"))
            }
        }
    }
}

#[async_trait::async_trait]
impl<A: Api> Provider for Vendor<A> {
    fn name(&self) -> &str {
        self.transport.provider()
    }

    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError> {
        let call = telemetry::CallTrace::start(self.transport.provider(), &request);
        let answered = async {
            let body = self.body(&request, false)?;
            let headers = self.headers(&request)?;
            let (body, attempts) = self.transport.post_for_body(&self.url, &headers, body).await?;
            let mut completion = A::parse_completion(&request, &body)
                .map_err(|cause| self.transport.error(ErrorKind::Protocol, format!("unexpected response: {cause}")))?;
            completion.attempts = attempts;
            Ok(completion)
        }
        .instrument(call.span.clone())
        .await;
        match &answered {
            Ok(completion) => call.completed(completion),
            Err(error) => call.failed(error),
        }
        answered
    }

    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError> {
        let call = telemetry::CallTrace::start(self.transport.provider(), &request);
        let started = async {
            let body = self.body(&request, true)?;
            let headers = self.headers(&request)?;
            let (response, attempts) = self.transport.post_for_stream(&self.url, &headers, body).await?;
            let decoder = A::decoder(&request, self.transport.provider(), attempts);
            Ok(event_stream(self.transport.provider(), self.transport.config(), response, decoder))
        }
        .instrument(call.span.clone())
        .await;
        match started {
            // The span lasts as long as the answer streams.
            Ok(stream) => Ok(telemetry::traced_stream(call, stream)),
            Err(error) => {
                call.failed(&error);
                Err(error)
            }
        }
    }
}
