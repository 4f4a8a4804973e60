//! Request rate, errors and latency per gRPC method, for every service the kit's server runs:
//! `rpc.server.requests` (a counter) and `rpc.server.call.duration` (seconds), both labelled
//! with the gRPC `service`, `method` and status `code` (`OK`, `UNAVAILABLE`…).
//!
//! The status is read where gRPC puts it: a unary error's in the response headers, any other
//! call's in the trailers that end its body; a body dropped before its trailers (the caller went
//! away) counts as `CANCELLED`. Methods no service knows (answered UNIMPLEMENTED) are labelled
//! `unknown`, so a caller cannot mint label values.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use http::{HeaderMap, Request, Response};
use hyper::body::{Body, Bytes, Frame, SizeHint};
use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram},
};
use tonic::{Code, Status};
use tower::{Layer, Service};

use crate::error::code_name;

/// Latency buckets in seconds, from a cache hit (sub-millisecond) to a long model answer.
const DURATION_BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The instruments, made once per server.
#[derive(Clone, Debug)]
struct Instruments {
    requests: Counter<u64>,
    duration: Histogram<f64>,
}

impl Instruments {
    fn new() -> Self {
        let meter = opentelemetry::global::meter("switchyard-kit");
        Self {
            requests: meter
                .u64_counter("rpc.server.requests")
                .with_description("gRPC calls answered, by service, method and status code")
                .build(),
            duration: meter
                .f64_histogram("rpc.server.call.duration")
                .with_unit("s")
                .with_description("gRPC call duration to its final status, by service, method and status code")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
        }
    }
}

/// Counts and times every gRPC call (see the module).
#[derive(Clone, Debug)]
pub struct RpcMetricsLayer {
    instruments: Instruments,
}

impl RpcMetricsLayer {
    pub fn new() -> Self {
        Self { instruments: Instruments::new() }
    }
}

impl Default for RpcMetricsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetrics { inner, instruments: self.instruments.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct RpcMetrics<S> {
    inner: S,
    instruments: Instruments,
}

/// One call in flight: what its measurement will say once its status is known.
#[derive(Debug)]
struct Call {
    path: String,
    started: Instant,
    instruments: Instruments,
}

impl Call {
    fn finish(self, code: Code) {
        let (service, method) = match code {
            Code::Unimplemented => ("unknown", "unknown"),
            _ => split_path(&self.path),
        };
        let labels = [
            KeyValue::new("service", service.to_owned()),
            KeyValue::new("method", method.to_owned()),
            KeyValue::new("code", code_name(code)),
        ];
        self.instruments.requests.add(1, &labels);
        self.instruments.duration.record(self.started.elapsed().as_secs_f64(), &labels);
    }
}

/// `/pkg.Service/Method` as (`pkg.Service`, `Method`).
fn split_path(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.split_once('/').unwrap_or((path, ""))
}

fn status_code(headers: &HeaderMap) -> Option<Code> {
    Status::from_header_map(headers).map(|status| status.code())
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for RpcMetrics<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<MeasuredBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let call = Call {
            path: request.uri().path().to_owned(),
            started: Instant::now(),
            instruments: self.instruments.clone(),
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = match response.await {
                Ok(response) => response,
                Err(err) => {
                    call.finish(Code::Unknown);
                    return Err(err);
                }
            };
            // A trailers-only answer (a unary error) carries its status in the headers.
            if let Some(code) = status_code(response.headers()) {
                call.finish(code);
                return Ok(response.map(|body| MeasuredBody { inner: body, call: None }));
            }
            Ok(response.map(|body| MeasuredBody { inner: body, call: Some(call) }))
        })
    }
}

/// A response body whose trailers give the call's status; dropped without them, it was cut.
#[derive(Debug)]
pub struct MeasuredBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> Drop for MeasuredBody<B> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.finish(Code::Cancelled);
        }
    }
}

impl<B> Body for MeasuredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(call) = this.call.take()
                {
                    call.finish(status_code(trailers).unwrap_or(Code::Unknown));
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = this.call.take() {
                    call.finish(Code::Internal);
                }
            }
            Poll::Ready(None) => {
                // A body that ends with no trailers answered without a status.
                if let Some(call) = this.call.take() {
                    call.finish(Code::Unknown);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_path_splits_into_service_and_method() {
        assert_eq!(
            split_path("/switchyard.router.v1.RouterService/Chat"),
            ("switchyard.router.v1.RouterService", "Chat")
        );
        assert_eq!(split_path("/odd"), ("odd", ""));
    }
}
