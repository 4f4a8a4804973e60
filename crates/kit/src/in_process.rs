//! The in-process transport: when a service is served by this very process (the whole suite in
//! one process), the kit's clients hand their calls straight to its server stack — the same
//! layers (request id, span, failure log and metrics, admission, identity) and the same routes
//! a network call reaches — instead of through TCP and HTTP/2. The gRPC contract is unchanged:
//! the generated clients frame and encode the messages, and metadata, deadlines and statuses
//! travel as they would over the wire.
//!
//! A server that opts in ([`crate::ServerArgs::serve_in_process`]) registers its stack under
//! its bound address while it serves. A client resolves the address on each call, so a service
//! that stops is seen at once: while it drains, new calls fail with UNAVAILABLE; once it has
//! stopped, calls go to its (closed) port and fail as a remote call would; calls still in flight
//! when it stops end with UNAVAILABLE.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    pin::Pin,
    sync::{
        Arc, LazyLock, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::{HeaderMap, Request, Response};
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::service::Routes;
use tonic::{Status, body::Body};
use tower::{Layer, Service, ServiceExt, util::BoxCloneSyncService};

/// A server's whole stack as an in-process caller reaches it.
pub type ServerStack = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// What a call to a service that is shutting down (or has stopped) in this process is told.
pub const SERVICE_STOPPING: &str = "the service is shutting down; retry the request";

/// The services this process serves in process, by bound address.
static SERVED: LazyLock<RwLock<HashMap<SocketAddr, Arc<Served>>>> = LazyLock::new(RwLock::default);
/// How many entries `SERVED` has: a process serving nothing in process pays one atomic load
/// per call.
static SERVED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Tells registrations of the same address apart (a service restarted on its port).
static GENERATION: AtomicU64 = AtomicU64::new(0);

struct Served {
    stack: ServerStack,
    generation: u64,
    draining: AtomicBool,
    /// Cut when the server has stopped: calls still running end with UNAVAILABLE.
    stopped: CancellationToken,
}

/// A server's place in the registry, held for as long as it serves: dropping it (the server
/// stopped, or its task was aborted) takes the service out and ends its calls in flight.
pub struct Registration {
    addr: SocketAddr,
    served: Arc<Served>,
}

impl Registration {
    /// Serves `stack` to callers in this process at `addr` (replacing an earlier registration
    /// of the same address).
    pub fn register(addr: SocketAddr, stack: ServerStack) -> Self {
        let served = Arc::new(Served {
            stack,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            draining: AtomicBool::new(false),
            stopped: CancellationToken::new(),
        });
        let mut map = SERVED.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(earlier) = map.insert(addr, served.clone()) {
            earlier.stopped.cancel();
        }
        SERVED_COUNT.store(map.len(), Ordering::Release);
        Self { addr, served }
    }
}

impl Registration {
    /// What the server's shutdown signal flips to start the drain.
    pub fn drain_switch(&self) -> DrainSwitch {
        DrainSwitch(self.served.clone())
    }
}

/// Starts a registered server's drain (see [`Registration::drain_switch`]).
pub struct DrainSwitch(Arc<Served>);

impl DrainSwitch {
    /// The server is shutting down: new calls fail with UNAVAILABLE (as a draining server's
    /// refused streams do), calls in flight go on.
    pub fn drain(&self) {
        self.0.draining.store(true, Ordering::Release);
    }
}

/// The server stack for in-process callers: `layers` around `routes`, as the network server
/// builds it.
pub fn stack<L, B>(layers: L, routes: Routes) -> ServerStack
where
    L: Layer<Routes>,
    L::Service: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request<Body>>>::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    BoxCloneSyncService::new(layers.layer(routes.prepare()).map_response(|response| response.map(Body::new)))
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut map = SERVED.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.get(&self.addr).is_some_and(|current| current.generation == self.served.generation) {
            map.remove(&self.addr);
        }
        SERVED_COUNT.store(map.len(), Ordering::Release);
        drop(map);
        self.served.stopped.cancel();
    }
}

/// A service this process serves at `addr`, if any. A server bound to every interface also
/// answers calls to a loopback address on its port.
pub(crate) fn lookup(addr: SocketAddr) -> Option<LocalService> {
    if SERVED_COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let map = SERVED.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let found = map.get(&addr).or_else(|| {
        let any: IpAddr = match addr.ip() {
            IpAddr::V4(ip) if ip.is_loopback() => Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(ip) if ip.is_loopback() => Ipv6Addr::UNSPECIFIED.into(),
            _ => return None,
        };
        map.get(&SocketAddr::new(any, addr.port()))
    })?;
    Some(LocalService { served: found.clone() })
}

/// Whether a service is served in this process at `addr` (and not shutting down).
pub fn is_served_here(addr: SocketAddr) -> bool {
    lookup(addr).is_some_and(|local| !local.served.draining.load(Ordering::Acquire))
}

/// One in-process service, resolved for one call.
pub(crate) struct LocalService {
    served: Arc<Served>,
}

impl LocalService {
    /// Calls the server's stack with `request` as the network would deliver it: with its
    /// origin, no client-side extensions, and the caller's deadline (`grpc-timeout`) applied
    /// the way tonic's channel applies it, so an expired deadline is the same error either way.
    pub(crate) async fn call(
        self,
        origin: SocketAddr,
        mut request: Request<Body>,
    ) -> Result<Response<Body>, tower::BoxError> {
        let served = self.served;
        if served.draining.load(Ordering::Acquire) || served.stopped.is_cancelled() {
            return Err(Status::unavailable(SERVICE_STOPPING).into());
        }
        *request.extensions_mut() = http::Extensions::new();
        let mut uri = std::mem::take(request.uri_mut()).into_parts();
        uri.scheme = Some(http::uri::Scheme::HTTP);
        uri.authority = origin.to_string().parse().ok();
        *request.uri_mut() = http::Uri::from_parts(uri).unwrap_or_default();
        let deadline = grpc_timeout(request.headers());
        let stopped = served.stopped.clone();
        let call = served.stack.clone().oneshot(request);
        let answered = async {
            match deadline {
                Some(deadline) => tokio::time::timeout(deadline, call)
                    .await
                    .map_err(|_| tower::BoxError::from(tonic::TimeoutExpired(()))),
                None => Ok(call.await),
            }
        };
        let response = tokio::select! {
            answered = answered => match answered? {
                Ok(response) => response,
                Err(never) => match never {},
            },
            () = stopped.cancelled() => return Err(Status::unavailable(SERVICE_STOPPING).into()),
        };
        let stopped = served.stopped.clone().cancelled_owned();
        Ok(response.map(|body| Body::new(UntilStopped { inner: body, stopped: Box::pin(stopped) })))
    }
}

/// A response body that ends with UNAVAILABLE if its server stops before it does, as a stream
/// cut by its server's exit would.
struct UntilStopped {
    inner: Body,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl HttpBody for UntilStopped {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Status::unavailable(SERVICE_STOPPING))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The caller's deadline from its `grpc-timeout` header (`<digits><unit>`, units H M S m u n),
/// as the gRPC spec writes it; a malformed value is no deadline, as tonic reads it.
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 60 * 60),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout_of(value: &'static str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", http::HeaderValue::from_static(value));
        grpc_timeout(&headers)
    }

    #[test]
    fn the_deadline_is_read_as_the_grpc_spec_writes_it() {
        assert_eq!(timeout_of("10S"), Some(Duration::from_secs(10)));
        assert_eq!(timeout_of("250m"), Some(Duration::from_millis(250)));
        assert_eq!(timeout_of("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(timeout_of("5000000u"), Some(Duration::from_secs(5)));
        assert_eq!(timeout_of("1n"), Some(Duration::from_nanos(1)));
        assert_eq!(timeout_of("S"), None);
        assert_eq!(timeout_of("123456789S"), None, "the spec allows at most 8 digits");
        assert_eq!(timeout_of("10x"), None);
        assert_eq!(timeout_of("-1S"), None);
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }
}
