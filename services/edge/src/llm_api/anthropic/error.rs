//! Anthropic's error shape, as a response and as a stream's `error` event.

use axum::{
    body::Body,
    response::{IntoResponse, Response, sse::Event},
};
use serde_json::{Value, json};

use crate::error::ApiError;

/// Anthropic's error types by status.
pub(super) fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

pub(super) fn error_body(error: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(error.status()), "message": error.message()}})
}

/// Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`, on the status
/// and headers (`retry-after`, `www-authenticate`) the edge's own error response has, which
/// also carries what the failure log needs.
pub(super) fn anthropic_error(error: ApiError) -> Response {
    let body = error_body(&error).to_string();
    let mut response = error.into_response();
    *response.body_mut() = Body::from(body);
    response
}

/// An error in the middle of a stream: Anthropic's `error` event.
pub(super) fn error_event(error: &ApiError) -> Event {
    Event::default().event("error").data(error_body(error).to_string())
}
