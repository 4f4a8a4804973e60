//! Every error answered to a caller is logged once, by the service that decided it, with the
//! request id. The server layer here logs each non-OK gRPC status a service answers (a unary
//! error's status in the response headers, a stream's in its trailers) and marks it with
//! [`ERROR_LOGGED`]; a service that passes on an error it received from another Switchyard
//! service keeps the mark ([`crate::ServiceError::logged_upstream`]), so the next hop — and
//! the edge — see it was logged and stay quiet. A status a client made itself (the other
//! service unreachable) has no mark: the caller decided it and logs it.
//!
//! The request id travels too: the server layer keeps the incoming `x-request-id` for the
//! request's task ([`request_id`]), and every channel the kit builds sends it on, so one chat
//! turn has one id in every service's logs.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::body::{Body, Bytes, Frame, SizeHint};
use tonic::{Code, Status};
use tower::{Layer, Service};

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

/// Logs the errors a gRPC server answers (see the module).
#[derive(Debug, Clone, Copy, Default)]
pub struct FailureLogLayer;

impl<S> Layer<S> for FailureLogLayer {
    type Service = FailureLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FailureLog { inner }
    }
}

#[derive(Debug, Clone)]
pub struct FailureLog<S> {
    inner: S,
}

/// What a failure's log line names.
#[derive(Debug)]
struct Call {
    method: String,
    request_id: String,
}

impl Call {
    /// Logs the status in `headers` (a response's, or a stream's trailers) unless it is OK or
    /// was logged already, and marks it.
    fn settle(self, headers: &mut HeaderMap) {
        let Some(status) = Status::from_header_map(headers) else { return };
        if status.code() == Code::Ok || headers.contains_key(ERROR_LOGGED) {
            return;
        }
        headers.insert(ERROR_LOGGED, HeaderValue::from_static("true"));
        let (request_id, method, code, error) =
            (self.request_id.as_str(), self.method.as_str(), code_name(status.code()), status.message());
        if caller_mistake(status.code()) {
            tracing::info!(request_id, method, code, error, "request refused");
        } else if status.code() == Code::ResourceExhausted {
            tracing::warn!(request_id, method, code, error, "request refused");
        } else {
            tracing::error!(request_id, method, code, error, "request failed");
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for FailureLog<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<LoggedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let request_id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let call = Call { method: request.uri().path().to_owned(), request_id: request_id.clone() };
        let health = call.method.starts_with("/grpc.health.v1.Health/");
        let response = with_request_id(request_id, self.inner.call(request));
        Box::pin(async move {
            let mut response = response.await?;
            // Health answers NOT_FOUND for names it does not know: probes, not failures.
            if health {
                return Ok(response.map(|body| LoggedBody { inner: body, call: None }));
            }
            // A trailers-only answer (a unary error) carries its status in the headers.
            if response.headers().contains_key("grpc-status") {
                call.settle(response.headers_mut());
                return Ok(response.map(|body| LoggedBody { inner: body, call: None }));
            }
            Ok(response.map(|body| LoggedBody { inner: body, call: Some(call) }))
        })
    }
}

/// A response body whose trailers (a stream's final status) are looked at on the way out.
#[derive(Debug)]
pub struct LoggedBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> Body for LoggedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                if let Some(trailers) = frame.trailers_mut()
                    && let Some(call) = this.call.take()
                {
                    call.settle(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_logged_once_and_marked() {
        let mut headers = HeaderMap::new();
        Status::unavailable("redis down").add_header(&mut headers).unwrap();
        Call { method: "/m".into(), request_id: "r".into() }.settle(&mut headers);
        assert!(headers.contains_key(ERROR_LOGGED), "marked once logged");

        let mut ok = HeaderMap::new();
        Status::new(Code::Ok, "").add_header(&mut ok).unwrap();
        Call { method: "/m".into(), request_id: "r".into() }.settle(&mut ok);
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
