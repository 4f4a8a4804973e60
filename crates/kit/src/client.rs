//! Client channels to other Switchyard services. Every channel the kit builds injects the
//! current span's W3C trace context and the request id, so one request is one trace, and one
//! id in the logs, across services.

use std::time::Duration;

use tonic::{
    Request, Status,
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

/// A channel that propagates trace context; pass it to any generated client's `new`.
pub type TracedChannel = InterceptedService<Channel, TraceContextInjector>;

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
    Ok(InterceptedService::new(endpoint.connect_lazy(), TraceContextInjector))
}
