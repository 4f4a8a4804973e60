//! Every error answered to a caller is logged once, by the service that decided it, with the
//! request id. The server layer here logs each non-OK gRPC status a service answers (a unary
//! error's status in the response headers, a stream's in its trailers) and marks it with
//! [`ERROR_LOGGED`]; a service that passes on an error it received from another Switchyard
//! service keeps the mark ([`crate::ServiceError::logged_upstream`]), so the next hop — and
//! the edge — see it was logged and stay quiet. A status a client made itself (the other
//! service unreachable) has no mark: the caller decided it and logs it. The server layer is
//! [`crate::call_outcome`], which also counts and times the call.
//!
//! The request id travels too: the server layer keeps the incoming `x-request-id` for the
//! request's task ([`request_id`]), and every channel the kit builds sends it on, so one chat
//! turn has one id in every service's logs.

use std::future::Future;

use http::{HeaderMap, HeaderValue};
use tonic::{Code, Status};

use crate::error::code_name;

/// Metadata on an error status: the service that decided the error has logged it.
pub const ERROR_LOGGED: &str = "x-switchyard-error-logged";

/// The request id header, kept from the caller or made by the server.
pub const REQUEST_ID: &str = "x-request-id";

tokio::task_local! {
    static CURRENT_REQUEST_ID: String;
}

/// The id of the request this task serves, if any.
pub fn request_id() -> Option<String> {
    CURRENT_REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `future` as part of request `id` (calls it makes to other services carry the id).
pub fn with_request_id<F: Future>(id: String, future: F) -> impl Future<Output = F::Output> {
    CURRENT_REQUEST_ID.scope(id, future)
}

/// `future` keeps the current request's id: for work spawned onto another task.
pub fn carry_request_id<F: Future>(future: F) -> impl Future<Output = F::Output> {
    CURRENT_REQUEST_ID.scope(request_id().unwrap_or_default(), future)
}

/// Whether a status received from another Switchyard service was logged there.
pub fn logged_upstream(status: &Status) -> bool {
    status.metadata().contains_key(ERROR_LOGGED)
}

/// Marks `status` as logged (by this service, or the one it came from).
pub fn mark_logged(status: &mut Status) {
    status.metadata_mut().insert(ERROR_LOGGED, tonic::metadata::MetadataValue::from_static("true"));
}

/// How loud an error is: a caller's mistake is information, a failure on our side an error.
pub fn caller_mistake(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::Cancelled
            | Code::Aborted
            | Code::Unimplemented
    )
}

/// What a failure's log line names.
#[derive(Debug)]
pub(crate) struct Failure<'a> {
    pub method: &'a str,
    pub request_id: &'a str,
}

impl Failure<'_> {
    /// Logs the status in `headers` (a response's, or a stream's trailers) unless it is OK or
    /// was logged already, and marks it.
    pub(crate) fn settle(&self, headers: &mut HeaderMap) {
        let Some(status) = Status::from_header_map(headers) else { return };
        if status.code() == Code::Ok || headers.contains_key(ERROR_LOGGED) {
            return;
        }
        headers.insert(ERROR_LOGGED, HeaderValue::from_static("true"));
        let (request_id, method, code, error) =
            (self.request_id, self.method, code_name(status.code()), status.message());
        if caller_mistake(status.code()) {
            tracing::info!(request_id, method, code, error, "request refused");
        } else if status.code() == Code::ResourceExhausted {
            tracing::warn!(request_id, method, code, error, "request refused");
        } else {
            tracing::error!(request_id, method, code, error, "request failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_logged_once_and_marked() {
        let mut headers = HeaderMap::new();
        Status::unavailable("redis down").add_header(&mut headers).unwrap();
        Failure { method: "/m", request_id: "r" }.settle(&mut headers);
        assert!(headers.contains_key(ERROR_LOGGED), "marked once logged");

        let mut ok = HeaderMap::new();
        Status::new(Code::Ok, "").add_header(&mut ok).unwrap();
        Failure { method: "/m", request_id: "r" }.settle(&mut ok);
        assert!(!ok.contains_key(ERROR_LOGGED), "OK is not a failure");
    }

    #[tokio::test]
    async fn the_request_id_follows_the_task_and_what_it_carries() {
        assert_eq!(request_id(), None);
        let seen = with_request_id("abc".into(), async {
            let spawned = tokio::spawn(carry_request_id(async { request_id() }));
            (request_id(), spawned.await.unwrap())
        })
        .await;
        assert_eq!(seen, (Some("abc".to_owned()), Some("abc".to_owned())));
    }
}
