//! Errors as HTTP: a status and a JSON body in Google's error format, which gRPC-JSON
//! transcoders also use, so a client written against Envoy or grpc-gateway reads ours:
//!
//! ```json
//! {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "query: must not be empty",
//!   "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest",
//!                "field_violations": [{"field": "query", "description": "must not be empty"}]}]}}
//! ```
//!
//! A gRPC status keeps its class on the way out (the standard code → HTTP mapping), so a
//! caller's mistake is a 4xx however deep it was found.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tonic::Code;
use tonic_types::StatusExt;

#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: Code,
    message: String,
    field: Option<String>,
    /// Seconds, for 429 and 503.
    retry_after: Option<u64>,
    /// `WWW-Authenticate` challenge, for 401.
    challenge: bool,
    /// A service's error that service logged: the edge only maps it.
    logged_upstream: bool,
}

impl ApiError {
    fn new(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
            challenge: false,
            logged_upstream: false,
        }
    }

    /// 400 for one request field; the message is `field: reason`.
    pub fn bad_request(field: impl Into<String>, reason: impl Into<String>) -> Self {
        let field = field.into();
        let reason = reason.into();
        let mut error = Self::new(StatusCode::BAD_REQUEST, Code::InvalidArgument, format!("{field}: {reason}"));
        error.field = Some(field);
        error
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNAUTHORIZED, Code::Unauthenticated, message);
        error.challenge = true;
        error
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, Code::PermissionDenied, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, Code::NotFound, message)
    }

    pub fn method_not_allowed(allowed: &[http::Method]) -> Self {
        let names: Vec<&str> = allowed.iter().map(http::Method::as_str).collect();
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Code::Unimplemented,
            format!("method not allowed; use {}", names.join(", ")),
        )
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::InvalidArgument,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    pub fn unsupported_media_type(found: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            format!("content-type `{found}` is not supported; send application/json"),
        )
    }

    pub fn rate_limited(retry_after_secs: u64) -> Self {
        let mut error = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            Code::ResourceExhausted,
            format!("rate limit reached for this credential; retry in {retry_after_secs} s"),
        );
        error.retry_after = Some(retry_after_secs);
        error
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable, message)
    }

    /// 503 for a request or stream the edge ends at shutdown; a retry reaches another replica
    /// (or this one restarted).
    pub fn shutting_down() -> Self {
        let mut error = Self::unavailable(crate::shutdown::EDGE_SHUTTING_DOWN);
        error.retry_after = Some(1);
        error
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, message)
    }

    /// A status from an upstream service, with the field of its `BadRequest` detail.
    pub fn from_status(status: &tonic::Status) -> Self {
        if connection_lost(status) {
            // The replica went away under the call (killed, or draining as the call was sent):
            // the service is unavailable for now, and another replica will answer a retry.
            let mut error = Self::unavailable("the upstream connection was lost: retry");
            error.retry_after = Some(1);
            return error;
        }
        let http = http_status(status.code());
        let (field, message) = match status.code() {
            Code::InvalidArgument | Code::OutOfRange => {
                let field = status
                    .get_details_bad_request()
                    .and_then(|bad| bad.field_violations.into_iter().next())
                    .map(|v| v.field);
                (field, status.message().to_owned())
            }
            // Never pass a server's internal detail to callers; the upstream logged it.
            Code::Internal | Code::Unknown | Code::DataLoss => (None, "internal error".to_owned()),
            _ => (None, status.message().to_owned()),
        };
        let mut error = Self::new(http, status.code(), message);
        error.field = field;
        error.logged_upstream = switchyard_kit::failures::logged_upstream(status);
        error.retry_after = retry_after(status);
        error
    }

    pub fn status(&self) -> u16 {
        self.status.as_u16()
    }

    pub fn http_status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The same error naming `field` instead of the one it names (a service's request field as
    /// the caller's API calls it), in its message too; everything else, the log marker
    /// included, is kept.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        let field = field.into();
        if let Some(reason) = self.field.as_ref().and_then(|old| self.message.strip_prefix(&format!("{old}: "))) {
            self.message = format!("{field}: {reason}");
        }
        self.field = Some(field);
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The `{"error": {...}}` body.
    pub fn body(&self) -> Value {
        let mut error = json!({
            "code": self.status.as_u16(),
            "status": code_name(self.code),
            "message": self.message,
        });
        if let Some(field) = &self.field {
            let description = self.message.strip_prefix(&format!("{field}: ")).unwrap_or(&self.message);
            error["details"] = json!([{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "field_violations": [{"field": field, "description": description}],
            }]);
        }
        json!({ "error": error })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum_json(&self.body())).into_response();
        let headers = response.headers_mut();
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.challenge {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"switchyard\""));
        }
        response.extensions_mut().insert(Answered {
            code: self.code,
            message: self.message,
            logged_upstream: self.logged_upstream,
        });
        response
    }
}

/// What an error response said, for [`log_failures`].
#[derive(Debug, Clone)]
struct Answered {
    code: Code,
    message: String,
    logged_upstream: bool,
}

/// Logs every error the edge answers, once, with the request id: what the edge decided
/// (credentials, rate limits, bad input, a service it could not reach), not a service's error
/// it merely maps — that service logged it. Calls to the services carry the request id.
pub async fn log_failures(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let request_id = request
        .headers()
        .get(switchyard_kit::failures::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = switchyard_kit::failures::with_request_id(request_id.clone(), next.run(request)).await;
    let status = response.status();
    if !status.is_client_error() && !status.is_server_error() {
        return response;
    }
    let answered = response.extensions().get::<Answered>();
    if answered.is_some_and(|a| a.logged_upstream) {
        return response;
    }
    let code = answered.map_or("", |a| code_name(a.code));
    let error = answered.map_or("", |a| a.message.as_str());
    let (request_id, method, status) = (request_id.as_str(), method.as_str(), status.as_u16());
    if status >= 500 {
        tracing::error!(request_id, method, path, status, code, error, "request failed");
    } else if status == 429 {
        tracing::warn!(request_id, method, path, status, code, error, "request refused");
    } else {
        tracing::info!(request_id, method, path, status, code, error, "request refused");
    }
    response
}

/// A JSON body with its content type (axum's `Json` needs a feature we do not otherwise use).
pub fn axum_json(value: &Value) -> Response {
    json_text_response(serde_json::to_vec(value).unwrap_or_default())
}

/// A 200 response of JSON already written out.
pub fn json_text_response(text: Vec<u8>) -> Response {
    let mut response = Response::new(axum::body::Body::from(text));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The HTTP status of a gRPC code (the mapping of `google.rpc.Code`).
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub use switchyard_kit::error::code_name;

/// Whether a status is the gRPC client's own report of a lost connection rather than an
/// upstream's answer. tonic reports a peer killed mid-body as UNKNOWN and a call sent as the
/// peer's graceful GOAWAY arrived as INTERNAL; both carry the transport's error as their source,
/// which a status decoded from a server's answer never has.
fn connection_lost(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::transport::Error>() || error.is::<std::io::Error>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Seconds a caller should wait before retrying an upstream's refusal: what its
/// `google.rpc.RetryInfo` says, rounded up (a spent budget's: the end of its period; no detail
/// with a delay: no header), else 1 s for an overloaded or unavailable service.
fn retry_after(status: &tonic::Status) -> Option<u64> {
    if let Some(info) = status.get_details_retry_info() {
        return info.retry_delay.map(|delay| (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).max(1));
    }
    matches!(status.code(), Code::ResourceExhausted | Code::Unavailable).then_some(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_statuses_keep_their_class_and_field() {
        let details = tonic_types::ErrorDetails::with_bad_request_violation("query", "must not be empty");
        let status = tonic::Status::with_error_details(Code::InvalidArgument, "query: must not be empty", details);
        let error = ApiError::from_status(&status);
        assert_eq!(error.status(), 400);
        assert_eq!(error.field(), Some("query"));
        let body = error.body();
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
        assert_eq!(body["error"]["details"][0]["field_violations"][0]["field"], "query");
        assert_eq!(body["error"]["details"][0]["field_violations"][0]["description"], "must not be empty");

        assert_eq!(ApiError::from_status(&tonic::Status::not_found("session s")).status(), 404);
        assert_eq!(ApiError::from_status(&tonic::Status::failed_precondition("closed")).status(), 409);
        let internal = ApiError::from_status(&tonic::Status::internal("pool exhausted at 10.0.0.3"));
        assert_eq!((internal.status(), internal.message()), (500, "internal error"));
        assert_eq!(ApiError::from_status(&tonic::Status::unavailable("down")).retry_after(), Some(1));
        // A connection broken under the call (the client's UNKNOWN with the transport's error
        // as its source) is the upstream being unavailable, not an internal error.
        let broken = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stream closed because of a broken pipe");
        let lost = ApiError::from_status(&tonic::Status::from_error(Box::new(broken)));
        assert_eq!((lost.status(), lost.retry_after()), (503, Some(1)));
        let overloaded = tonic::Status::resource_exhausted("server overloaded");
        assert_eq!(ApiError::from_status(&overloaded).retry_after(), Some(1));
        // A spent budget says when its period ends; a refusal whose detail has no delay, none.
        let retry = tonic_types::ErrorDetails::with_retry_info(Some(std::time::Duration::from_millis(3_600_400)));
        let spent = tonic::Status::with_error_details(Code::ResourceExhausted, "budget acme is spent", retry);
        assert_eq!(ApiError::from_status(&spent).retry_after(), Some(3601));
        let no_delay = tonic_types::ErrorDetails::with_retry_info(None);
        let spent = tonic::Status::with_error_details(Code::ResourceExhausted, "budget acme is spent", no_delay);
        assert_eq!(ApiError::from_status(&spent).retry_after(), None);
    }
}
