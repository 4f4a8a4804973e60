//! The gRPC server every service runs: health and reflection (v1 and v1alpha, so grpcurl
//! 1.8 works), a request id, a span per request continuing the caller's trace, admission
//! control (a global concurrency limit that sheds instead of queueing, and a deadline), rate,
//! errors and latency per method (`rpc_metrics`), every error answered logged once
//! (`failures`), the caller's identity (`x-tenant-id`, `x-user-id`), message size limits, a
//! deadline for a new connection's HTTP/2 preface, an accept loop that backs off when the
//! process is out of file descriptors, and a graceful shutdown that drains in-flight calls and,
//! when the grace runs out, ends the calls and streams still open with UNAVAILABLE rather than
//! cutting them mid-frame ([`ShutdownNotice`], [`ShutdownCutLayer`]).

use std::{
    convert::Infallible,
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use anyhow::Context as _;
use futures::Stream;
use http::{Request, Response};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::Sleep,
};
use tonic::{
    Status,
    server::NamedService,
    service::RoutesBuilder,
    transport::{
        Server,
        server::{Connected, TcpConnectInfo},
    },
};
use tower::{Layer, Service, ServiceBuilder};
use tower_http::{
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::{DefaultOnFailure, DefaultOnResponse, TraceLayer},
};
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{
    call_outcome::CallOutcomeLayer,
    config::ServerArgs,
    health::HealthHandle,
    http_server::{ACCEPT_BACKOFF, is_connection_error},
    identity::IdentityLayer,
    in_process, telemetry,
};

/// A bound, not yet serving, gRPC server.
pub struct GrpcServer {
    listener: TcpListener,
    args: ServerArgs,
    routes: RoutesBuilder,
    service_names: Vec<&'static str>,
    health: HealthHandle,
    notice: ShutdownNotice,
}

impl GrpcServer {
    /// Binds `addr` (port 0 picks a free port; see [`GrpcServer::local_addr`]). Health starts
    /// NOT_SERVING for every service added.
    pub async fn bind(addr: SocketAddr, args: ServerArgs) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let mut routes = RoutesBuilder::default();
        routes.add_service(health_service);
        Ok(Self {
            listener,
            args,
            routes,
            service_names: Vec::new(),
            health: HealthHandle::new(reporter),
            notice: ShutdownNotice::default(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has an address; `bind` succeeded.
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    pub fn args(&self) -> &ServerArgs {
        &self.args
    }

    /// The health statuses; the service marks itself ready once its dependencies answer.
    pub fn health(&self) -> HealthHandle {
        self.health.clone()
    }

    /// What streaming handlers watch to end their streams before the shutdown grace runs out.
    pub fn shutdown_notice(&self) -> ShutdownNotice {
        self.notice.clone()
    }

    /// Adds a generated service (already configured with message size limits).
    pub fn add_service<S>(&mut self, service: S) -> &mut Self
    where
        S: Service<Request<tonic::body::Body>, Error = Infallible> + NamedService + Clone + Send + Sync + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.service_names.push(S::NAME);
        self.health.register(S::NAME);
        self.routes.add_service(service);
        self
    }

    /// Serves until `shutdown` completes, then stops accepting, reports NOT_SERVING, and
    /// waits up to the shutdown grace period for in-flight calls; calls still running near its
    /// end are answered UNAVAILABLE ([`ShutdownCutLayer`]) and streams still open are told to
    /// finish with UNAVAILABLE (see [`ShutdownNotice`]).
    pub async fn serve(mut self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        let mut reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(switchyard_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("grpc.health.v1.Health");
        let mut reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(switchyard_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("grpc.health.v1.Health");
        for name in &self.service_names {
            reflection_v1 = reflection_v1.with_service_name(*name);
            reflection_v1alpha = reflection_v1alpha.with_service_name(*name);
        }
        self.routes.add_service(reflection_v1.build_v1()?);
        self.routes.add_service(reflection_v1alpha.build_v1alpha()?);
        self.health.apply().await;

        let addr = self.local_addr();
        let args = self.args.clone();
        let health = self.health.clone();
        let notice = self.notice.clone();
        let stack = ServiceBuilder::new()
            .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
            .layer(PropagateRequestIdLayer::x_request_id())
            .layer(
                TraceLayer::new_for_grpc()
                    .make_span_with(request_span)
                    .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                    .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
            )
            // Every error answered logged once with the request id (kept for the calls the
            // request makes), and rate, errors and latency per method; inside the span,
            // outside admission so sheds are logged and counted too.
            .layer(CallOutcomeLayer::new())
            .layer(AdmissionLayer::new(args.concurrency_limit, args.request_timeout))
            // A call still running when the grace is about to end is answered UNAVAILABLE while
            // the connection is still up, rather than losing the connection with the process.
            .layer(ShutdownCutLayer::new(notice.clone()))
            // Tenant and user for every service, read once: handlers take `Identity::of`.
            .layer(IdentityLayer::grpc())
            .into_inner();

        // Callers in this process reach the same layers and routes without the network, for as
        // long as this serves.
        let routes = self.routes.routes();
        let in_process = args
            .serve_in_process
            .then(|| in_process::Registration::register(addr, in_process::stack(stack.clone(), routes.clone())));
        let drain_in_process = in_process.as_ref().map(in_process::Registration::drain_switch);
        let draining = Arc::new(tokio::sync::Notify::new());
        let signal = {
            let draining = draining.clone();
            async move {
                shutdown.await;
                tracing::info!("shutting down: no new connections, draining in-flight calls");
                if let Some(switch) = drain_in_process {
                    switch.drain();
                }
                health.begin_shutdown().await;
                draining.notify_one();
            }
        };

        let incoming = incoming(self.listener, args.handshake_timeout);
        tracing::info!(%addr, services = ?self.service_names, "grpc server listening");
        let serving = Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .layer(stack)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, signal);

        tokio::select! {
            result = serving => result.context("grpc server failed")?,
            () = async { draining.notified().await; notice.run_grace(args.shutdown_grace).await } => {
                tracing::warn!(grace = ?args.shutdown_grace, "shutdown grace period over, exiting with calls in flight");
            }
        }
        drop(in_process);
        tracing::info!("grpc server stopped");
        Ok(())
    }
}

/// The listener's connections as tonic serves them. tonic's own `TcpIncoming` hands a
/// listener error (out of file descriptors, say) to its accept loop, which logs it at trace
/// level and accepts again at once: with the descriptors used up, the same error comes back
/// at once, and the loop spins a core until one is freed. Here the error is logged and the
/// next accept waits [`ACCEPT_BACKOFF`], as the HTTP listener does; the stream never ends
/// and never yields an error, so the server never stops over it.
fn incoming(listener: TcpListener, handshake_timeout: Duration) -> impl Stream<Item = io::Result<Handshaking>> {
    futures::stream::unfold(listener, move |listener| async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    // Streamed answers go out message by message: no waiting to fill a segment.
                    let _ = stream.set_nodelay(true);
                    return Some((Ok(Handshaking::new(stream, handshake_timeout)), listener));
                }
                Err(err) if is_connection_error(&err) => {}
                Err(err) => {
                    tracing::error!(error = %err, backoff = ?ACCEPT_BACKOFF, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    })
}

/// The length of the HTTP/2 connection preface (`PRI * HTTP/2.0...`), the first bytes a
/// client sends.
const PREFACE_LEN: usize = 24;

/// An accepted connection that owes its HTTP/2 preface within the handshake timeout: until
/// its first [`PREFACE_LEN`] bytes have arrived, a read that would wait past the deadline
/// fails instead, and hyper closes the connection. Afterwards it is the plain socket (idle
/// HTTP/2 connections are HTTP/2's business: keep-alive pings).
struct Handshaking {
    stream: TcpStream,
    owed: usize,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Handshaking {
    fn new(stream: TcpStream, timeout: Duration) -> Self {
        let deadline = (!timeout.is_zero()).then(|| Box::pin(tokio::time::sleep(timeout)));
        Self { stream, owed: PREFACE_LEN, deadline }
    }
}

impl Connected for Handshaking {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Handshaking {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.owed = this.owed.saturating_sub(buf.filled().len() - before);
                if this.owed == 0 {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if this.deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready()) {
                    tracing::debug!("closing a connection that sent no HTTP/2 preface within the handshake timeout");
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 connection preface within the handshake timeout",
                    )));
                }
                Poll::Pending
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
        }
    }
}

impl AsyncWrite for Handshaking {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// One span per call, continuing the caller's trace (W3C `traceparent`).
fn request_span<B>(request: &Request<B>) -> tracing::Span {
    let path = request.uri().path();
    let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
    let span = tracing::info_span!(
        "grpc.request",
        otel.name = %path,
        otel.kind = "server",
        rpc.system = "grpc",
        request_id = %request_id,
    );
    // Fails only when no OpenTelemetry layer is installed (e.g. in unit tests): nothing to link.
    let _ = span.set_parent(telemetry::extract_context(request.headers()));
    span
}

/// What a stream's caller is told when the server ends the stream at shutdown.
pub const SHUTTING_DOWN: &str = "the server is shutting down; retry the request";

/// The end of the shutdown grace as streaming handlers see it. A stream can outlive any grace
/// (a long answer), and one cut by the process exiting leaves its caller with a bare EOF and its
/// work unrecorded; so a little before the grace ends the notice is cut, and a handler ends its
/// stream with UNAVAILABLE ([`ShutdownNotice::status`]) and records what it had, while the
/// transport is still up.
#[derive(Clone, Debug, Default)]
pub struct ShutdownNotice {
    cut: tokio_util::sync::CancellationToken,
}

impl ShutdownNotice {
    /// Completes once streams still open must end.
    pub async fn cut(&self) {
        self.cut.cancelled().await;
    }

    pub fn is_cut(&self) -> bool {
        self.cut.is_cancelled()
    }

    /// The status a stream ended by shutdown closes with.
    pub fn status() -> Status {
        Status::unavailable(SHUTTING_DOWN)
    }

    /// How long before the end of `grace` the notice is cut: long enough for handlers to send
    /// their last status and record the interrupted work, and never more than a quarter of
    /// the grace, so a short grace still lets calls finish.
    pub fn margin(grace: Duration) -> Duration {
        (grace / 4).min(Duration::from_secs(2))
    }

    /// Waits out `grace` (begun at shutdown), cutting the notice [`ShutdownNotice::margin`]
    /// before its end.
    pub async fn run_grace(&self, grace: Duration) {
        let margin = Self::margin(grace);
        tokio::time::sleep(grace - margin).await;
        tracing::warn!(grace = ?grace, "shutdown grace ending: ending the streams still open with UNAVAILABLE");
        self.cut.cancel();
        tokio::time::sleep(margin).await;
    }
}

/// Waits for SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// Admission control for every call but health checks: a global in-flight limit that rejects
/// at once with RESOURCE_EXHAUSTED when full (queueing would only turn overload into latency),
/// and a server-side deadline answered with DEADLINE_EXCEEDED.
#[derive(Clone)]
pub struct AdmissionLayer {
    permits: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

impl AdmissionLayer {
    pub fn new(limit: usize, timeout: Duration) -> Self {
        Self { permits: Arc::new(Semaphore::new(limit)), limit, timeout }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission { inner, layer: self.clone() }
    }
}

#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    layer: AdmissionLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Takes the inner service that `poll_ready` readied, for the call's future to own, and leaves
/// a fresh clone in its place for the next `poll_ready`: the clone is not ready, the taken one is.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

impl<S, B, ResBody> Service<Request<B>> for Admission<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        if request.uri().path().starts_with("/grpc.health.v1.Health/") {
            return Box::pin(inner.call(request));
        }
        let Ok(permit) = self.layer.permits.clone().try_acquire_owned() else {
            // Logged by the failure log, as every error answered.
            let limit = self.layer.limit;
            return Box::pin(async move {
                Ok(Status::resource_exhausted(format!(
                    "server overloaded: {limit} requests already in flight, retry with backoff"
                ))
                .into_http())
            });
        };
        let timeout = self.layer.timeout;
        Box::pin(async move {
            let result = tokio::time::timeout(timeout, inner.call(request)).await;
            drop(permit);
            match result {
                Ok(response) => response,
                Err(_) => Ok(Status::deadline_exceeded(format!(
                    "request did not finish within the server's {timeout:?} deadline"
                ))
                .into_http()),
            }
        })
    }
}

/// Answers a call whose handler has not answered by the time the [`ShutdownNotice`] is cut with
/// UNAVAILABLE ([`SHUTTING_DOWN`]), a little before the grace ends, while the connection is
/// still up: otherwise the process exits under it and the caller's client makes what it can of
/// a lost connection (tonic's UNKNOWN "transport error"). It covers every unary and
/// client-streaming call; a server stream has its response head already, and its handler ends
/// it (see [`ShutdownNotice`]).
///
/// The handler is polled first, so one that watches the notice itself (the router's turn,
/// recording what it had) answers with its own status in the same poll; one that does not is
/// dropped, as the exit would have dropped it.
#[derive(Clone)]
pub struct ShutdownCutLayer {
    notice: ShutdownNotice,
}

impl ShutdownCutLayer {
    pub fn new(notice: ShutdownNotice) -> Self {
        Self { notice }
    }
}

impl<S> Layer<S> for ShutdownCutLayer {
    type Service = ShutdownCut<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ShutdownCut { inner, notice: self.notice.clone() }
    }
}

#[derive(Clone)]
pub struct ShutdownCut<S> {
    inner: S,
    notice: ShutdownNotice,
}

impl<S, B, ResBody> Service<Request<B>> for ShutdownCut<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let notice = self.notice.clone();
        Box::pin(async move {
            tokio::select! {
                biased;
                response = inner.call(request) => response,
                // Logged by the failure log, as every error answered.
                () = notice.cut() => Ok(ShutdownNotice::status().into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_is_cut_a_little_before_the_grace_ends() {
        assert_eq!(ShutdownNotice::margin(Duration::from_secs(75)), Duration::from_secs(2));
        assert_eq!(ShutdownNotice::margin(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(ShutdownNotice::margin(Duration::ZERO), Duration::ZERO);
    }

    type Answer = Result<Response<tonic::body::Body>, Infallible>;

    /// A call's status as the layer answered it (a trailers-only response).
    fn status_of(answer: Answer) -> (tonic::Code, String) {
        let Ok(response) = answer;
        let status = Status::from_header_map(response.headers()).expect("a grpc-status header");
        (status.code(), status.message().to_owned())
    }

    #[tokio::test]
    async fn a_call_still_running_at_the_cut_is_answered_unavailable() {
        let notice = ShutdownNotice::default();
        let hanging = tower::service_fn(|_: Request<()>| std::future::pending::<Answer>());
        let mut service = ShutdownCutLayer::new(notice.clone()).layer(hanging);
        let call = tokio::spawn(service.call(Request::new(())));
        tokio::task::yield_now().await;
        assert!(!call.is_finished(), "a call runs until the cut");
        notice.cut.cancel();
        let answer = tokio::time::timeout(Duration::from_secs(5), call).await.expect("answered at the cut");
        assert_eq!(status_of(answer.expect("the call task")), (tonic::Code::Unavailable, SHUTTING_DOWN.to_owned()));
    }

    #[tokio::test]
    async fn a_handler_that_watches_the_notice_answers_with_its_own_status() {
        let notice = ShutdownNotice::default();
        let watching = {
            let notice = notice.clone();
            tower::service_fn(move |_: Request<()>| {
                let notice = notice.clone();
                async move {
                    notice.cut().await;
                    Ok(Status::unavailable("turn interrupted: recorded").into_http())
                }
            })
        };
        let mut service = ShutdownCutLayer::new(notice.clone()).layer(watching);
        notice.cut.cancel();
        let answer = service.call(Request::new(())).await;
        assert_eq!(status_of(answer), (tonic::Code::Unavailable, "turn interrupted: recorded".to_owned()));
    }
}
