//! Client channels to other Switchyard services. Every channel the kit builds injects the
//! current span's W3C trace context and the request id, so one request is one trace, and one
//! id in the logs, across services. A service this process serves itself is called in process
//! ([`crate::in_process`]) rather than over the network, with the same contract.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tonic::{
    Request, Status,
    body::Body,
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};
use tower::{Service, ServiceExt};

use crate::in_process;

/// A channel that propagates trace context; pass it to any generated client's `new`.
pub type TracedChannel = InterceptedService<Upstream, TraceContextInjector>;

/// The way to one upstream service: in process while this process serves it (see
/// [`crate::in_process`]), else the network channel to its address. Resolved on every call,
/// so a service that stops or starts in this process is seen at once.
#[derive(Clone, Debug)]
pub struct Upstream {
    remote: Channel,
    /// The address the URL names, when it is an IP address (only those can be served here).
    addr: Option<SocketAddr>,
    /// `poll_ready` readied the network channel, so `call` must use it.
    remote_ready: bool,
}

impl Upstream {
    /// Whether calls now go in process rather than over the network.
    pub fn is_in_process(&self) -> bool {
        self.addr.is_some_and(in_process::is_served_here)
    }
}

type UpstreamFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, tower::BoxError>> + Send>>;

impl Service<http::Request<Body>> for Upstream {
    type Response = http::Response<Body>;
    type Error = tower::BoxError;
    type Future = UpstreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.addr.and_then(in_process::lookup).is_some() {
            return Poll::Ready(Ok(()));
        }
        let ready = self.remote.poll_ready(cx).map_err(Into::into);
        self.remote_ready = matches!(ready, Poll::Ready(Ok(())));
        ready
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if std::mem::take(&mut self.remote_ready) {
            let call = self.remote.call(request);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        match self.addr.and_then(|addr| Some((addr, in_process::lookup(addr)?))) {
            Some((addr, local)) => Box::pin(local.call(addr, request)),
            // Served here at `poll_ready`, gone since: over the network, as a stopped service's
            // callers are.
            None => {
                let remote = self.remote.clone();
                Box::pin(async move { remote.oneshot(request).await.map_err(Into::into) })
            }
        }
    }
}

/// Adds `traceparent`/`tracestate` for the current span to every outgoing request, and the id
/// of the request being served ([`crate::failures::request_id`]) unless one is set already.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceContextInjector;

impl Interceptor for TraceContextInjector {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let mut headers = std::mem::take(request.metadata_mut()).into_headers();
        crate::telemetry::inject_current_context(&mut headers);
        if !headers.contains_key(crate::failures::REQUEST_ID)
            && let Some(id) = crate::failures::request_id().and_then(|id| http::HeaderValue::from_str(&id).ok())
            && !id.is_empty()
        {
            headers.insert(crate::failures::REQUEST_ID, id);
        }
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        Ok(request)
    }
}

/// Errors building a channel (only the URL can be wrong: the connection itself is lazy).
#[derive(Debug, thiserror::Error)]
#[error("invalid service url `{url}`: {source}")]
pub struct InvalidUrl {
    url: String,
    source: tonic::transport::Error,
}

/// A lazily connecting channel to `url` (e.g. `http://127.0.0.1:50051`): the first call
/// connects, and a broken connection is re-established on the next call, so a dependency that
/// starts later or restarts does not need this process to restart.
pub fn connect_lazy(url: &str) -> Result<TracedChannel, InvalidUrl> {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|source| InvalidUrl { url: url.to_owned(), source })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let addr = endpoint.uri().authority().and_then(|authority| authority.as_str().parse().ok());
    let upstream = Upstream { remote: endpoint.connect_lazy(), addr, remote_ready: false };
    Ok(InterceptedService::new(upstream, TraceContextInjector))
}
