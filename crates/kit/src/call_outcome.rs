//! The server layer that sees how each gRPC call ends, once, and acts on it: logs a failure
//! (with the request id, marked so the next hop stays quiet: [`crate::failures`]) and counts and
//! times the call ([`crate::rpc_metrics`]). One layer, so the hot path boxes one future and
//! wraps one body per call whatever is done with its outcome.
//!
//! The status is read where gRPC puts it: a unary error's in the response headers, any other
//! call's in the trailers that end its body. A body that errors counts as `INTERNAL`, one that
//! ends without trailers as `UNKNOWN`, and one dropped before its end (the caller went away) as
//! `CANCELLED`. The request id of the call is kept for its task, so the calls it makes carry it.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use http::{HeaderMap, Request, Response};
use hyper::body::{Body, Bytes, Frame, SizeHint};
use tonic::{Code, Status};
use tower::{Layer, Service};

use crate::{
    failures::{Failure, REQUEST_ID, with_request_id},
    rpc_metrics::Instruments,
};

/// Logs, counts and times every call a gRPC server answers (see the module).
#[derive(Clone, Debug)]
pub struct CallOutcomeLayer {
    instruments: Instruments,
}

impl CallOutcomeLayer {
    pub fn new() -> Self {
        Self { instruments: Instruments::new() }
    }
}

impl Default for CallOutcomeLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for CallOutcomeLayer {
    type Service = CallOutcome<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallOutcome { inner, instruments: self.instruments.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct CallOutcome<S> {
    inner: S,
    instruments: Instruments,
}

/// One call in flight, until its status is known.
#[derive(Debug)]
struct Call {
    path: String,
    request_id: String,
    started: Instant,
    instruments: Instruments,
}

impl Call {
    /// Health answers NOT_FOUND for names it does not know: probes, not failures to log.
    fn is_health(&self) -> bool {
        self.path.starts_with("/grpc.health.v1.Health/")
    }

    /// The call ended with the status in `headers` (the response's or the trailers): logs a
    /// failure, marks it, and records the call.
    fn settle(self, headers: &mut HeaderMap) {
        let code = Status::from_header_map(headers).map_or(Code::Unknown, |status| status.code());
        if !self.is_health() {
            Failure { method: &self.path, request_id: &self.request_id }.settle(headers);
        }
        self.instruments.record(&self.path, self.started, code);
    }

    /// The call ended without a status the caller saw (cut, or the body failed).
    fn end(self, code: Code) {
        self.instruments.record(&self.path, self.started, code);
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for CallOutcome<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<ObservedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let request_id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let call = Call {
            path: request.uri().path().to_owned(),
            request_id: request_id.clone(),
            started: Instant::now(),
            instruments: self.instruments.clone(),
        };
        let response = with_request_id(request_id, self.inner.call(request));
        Box::pin(async move {
            let mut response = match response.await {
                Ok(response) => response,
                Err(err) => {
                    call.end(Code::Unknown);
                    return Err(err);
                }
            };
            // A trailers-only answer (a unary error) carries its status in the headers.
            if response.headers().contains_key("grpc-status") {
                call.settle(response.headers_mut());
                return Ok(response.map(|body| ObservedBody { inner: body, call: None }));
            }
            Ok(response.map(|body| ObservedBody { inner: body, call: Some(call) }))
        })
    }
}

/// A response body whose trailers give the call's status; dropped before them, it was cut.
#[derive(Debug)]
pub struct ObservedBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> Drop for ObservedBody<B> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.end(Code::Cancelled);
        }
    }
}

impl<B> Body for ObservedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &mut polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_mut()
                    && let Some(call) = this.call.take()
                {
                    call.settle(trailers);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = this.call.take() {
                    call.end(Code::Internal);
                }
            }
            Poll::Ready(None) => {
                if let Some(call) = this.call.take() {
                    call.end(Code::Unknown);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
