//! The HTTP listener of the services that speak HTTP (the edge, the gateway's MCP endpoint):
//! an axum app served over hyper's HTTP/1.1 and HTTP/2 connections, with what `axum::serve`
//! lacks against slow and idle clients — a deadline for a request's head, one for a connection
//! with no request in progress, and a cap on open connections, at which a new connection takes
//! the place of the one idle longest — and the same graceful shutdown (stop accepting, let
//! in-flight requests finish, then return).
//!
//! The deadlines follow the connection, not hyper's own `header_read_timeout` (which on a
//! keep-alive connection also runs while waiting for the next request, so an idle connection
//! could not be kept longer than a head may take to arrive, and which does not cover HTTP/2 or
//! the bytes read before the protocol is known). A request in progress — including a response
//! still streaming, such as Server-Sent Events — is never cut by them.

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    io,
    net::SocketAddr,
    pin::{Pin, pin},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::{Body, Bytes},
};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto::Builder,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long clients may take, and how many may be connected at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// From the first byte of a request to the end of its head (request line and headers); a
    /// new connection owes its first request head within this from being accepted. Zero turns
    /// it off.
    pub header_timeout: Duration,
    /// How long a connection may stay open between requests (from the end of one response to
    /// the first byte of the next). Zero turns it off.
    pub idle_timeout: Duration,
    /// Connections open at once. A new connection past it closes the connection idle longest
    /// (no request in progress: waiting for its first request or its next one) and takes its
    /// place; when every connection has a request in progress, new ones wait (in the listen
    /// backlog) until one ends its request or closes.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            // Longer than the 60 s idle timeout of common load balancers and ingress proxies,
            // so they, not we, close a pooled connection: one we close as they reuse it fails a
            // request.
            idle_timeout: Duration::from_secs(75),
            max_connections: 4096,
        }
    }
}

/// How long to wait before accepting again after the listener failed (out of file
/// descriptors, say), rather than spinning.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// At most one "connection limit reached" warning of each kind this often.
const LIMIT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How much of a refused request body is still read, and dropped, after the refusal.
const DISCARD_BYTES: usize = 8 * 1024 * 1024;
/// How long a refused request body is still read after the refusal.
const DISCARD_TIME: Duration = Duration::from_secs(5);

/// Why [`read_body`] returned no body.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than the limit (announced or read).
    TooLarge,
    /// The connection failed while reading it.
    Unreadable(String),
}

/// Reads a request body of at most `limit` bytes. A larger one is refused as soon as its
/// announced length (`Content-Length`) or the bytes read pass the limit, and the rest is read
/// and dropped in the background, up to 8 MiB or for 5 s: a connection closed with request
/// bytes unread is reset by the kernel, and a client still sending its body would see the
/// reset instead of the refusal (a body just over the limit would lose its 413).
pub async fn read_body(body: Body, limit: usize, announced: Option<usize>) -> Result<Bytes, BodyError> {
    let mut body = body;
    if announced.is_some_and(|length| length > limit) {
        discard(body);
        return Err(BodyError::TooLarge);
    }
    let mut read = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|err| BodyError::Unreadable(err.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if read.len() + data.len() > limit {
                discard(body);
                return Err(BodyError::TooLarge);
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(read))
}

/// Reads and drops what is left of a refused body, within [`DISCARD_BYTES`] and
/// [`DISCARD_TIME`]; past either the connection closes as it would have.
fn discard(mut body: Body) {
    tokio::spawn(async move {
        let mut left = DISCARD_BYTES;
        let reading = async {
            while let Some(Ok(frame)) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                let size = frame.data_ref().map_or(0, Bytes::len);
                if size >= left {
                    return;
                }
                left -= size;
            }
        };
        let _ = tokio::time::timeout(DISCARD_TIME, reading).await;
    });
}

/// Serves `app` on `listener` until `shutdown`; then stops accepting, asks every connection to
/// finish (idle ones close at once, HTTP/2 ones get GOAWAY) and returns once all have closed.
/// A caller that bounds the drain drops this future: the connections still open are closed.
///
/// At the connection limit a new connection closes the one idle longest and takes its place:
/// otherwise connections that say nothing (or idle keep-alive ones) could hold every place,
/// and a new client would wait for a header or idle timeout to pass. Closing an idle
/// connection loses nothing in progress; its client opens a new one for its next request.
pub async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, shutdown: impl Future<Output = ()> + Send) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let open = Arc::new(OpenConnections::default());
    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    let mut warned_evicting: Option<Instant> = None;
    let mut warned_full: Option<Instant> = None;
    'accepting: loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) if is_connection_error(&err) => continue,
                Err(err) => {
                    tracing::error!(error = %err, "accepting a connection failed");
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => loop {
                // Every place is taken: the connection idle longest makes room, or, with every
                // connection busy, this one waits until one of them is idle or closes.
                if open.evict_longest_idle() {
                    if warned_evicting.is_none_or(|at| at.elapsed() >= LIMIT_WARNING_EVERY) {
                        tracing::warn!(
                            max_connections = limits.max_connections,
                            "connection limit reached: new connections take the place of the connections idle longest"
                        );
                        warned_evicting = Some(Instant::now());
                    }
                } else if warned_full.is_none_or(|at| at.elapsed() >= LIMIT_WARNING_EVERY) {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached with every connection busy: new connections wait"
                    );
                    warned_full = Some(Instant::now());
                }
                tokio::select! {
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => break permit,
                        // The semaphore is never closed.
                        Err(_) => break 'accepting,
                    },
                    () = open.became_idle.notified() => {}
                    () = &mut shutdown => break 'accepting,
                }
            },
        };
        // Streamed answers go out token by token: no waiting to fill a segment.
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new(open.clone()));
        let registered = open.register(activity.clone());
        connections.spawn(connection(stream, peer, app.clone(), limits, stop.clone(), activity, (permit, registered)));
    }
    drop(listener);
    stop.cancel();
    while connections.join_next().await.is_some() {}
}

/// The connections open, for finding the one idle longest when the limit is reached.
#[derive(Default)]
struct OpenConnections {
    by_id: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Told when a connection's last request in progress ends: a new connection waiting for a
    /// place may take that one's.
    became_idle: Notify,
}

impl OpenConnections {
    fn register(self: &Arc<Self>, activity: Arc<Activity>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner).insert(id, activity);
        Registered { open: self.clone(), id }
    }

    /// Asks the connection with no request in progress that has been so longest to close;
    /// false when every connection is busy.
    fn evict_longest_idle(&self) -> bool {
        let by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let longest = by_id
            .values()
            .filter_map(|activity| activity.idle_since().map(|since| (since, activity)))
            .min_by_key(|(since, _)| *since);
        match longest {
            Some((_, activity)) => {
                activity.evict();
                true
            }
            None => false,
        }
    }
}

/// A connection's entry in [`OpenConnections`], removed when the connection ends.
struct Registered {
    open: Arc<OpenConnections>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.open.by_id.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

/// Errors of one incoming connection (it went away before it was accepted), not of the
/// listener.
pub(crate) fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until it ends, a deadline passes with no request in progress, it is
/// asked to make room while it has none, or shutdown (then gracefully). The permit and entry
/// are the connection's place under the limit.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: HttpLimits,
    stop: CancellationToken,
    activity: Arc<Activity>,
    _place: (OwnedSemaphorePermit, Registered),
) {
    let io = TokioIo::new(Watched { stream, activity: activity.clone() });
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let in_flight = requests.begin();
        let app = app.clone();
        async move {
            let response = app.oneshot(request.map(Body::new)).await.unwrap_or_else(|never| match never {});
            Ok::<_, Infallible>(response.map(|body| Tracked { body, _in_flight: in_flight }))
        }
    });
    let builder = Builder::new(TokioExecutor::new());
    let mut conn = pin!(builder.serve_connection_with_upgrades(io, service));
    let mut stopping = false;
    loop {
        let changed = activity.changed.notified();
        if activity.take_eviction() {
            tracing::debug!(%peer, "closing the connection idle longest: the connection limit is reached");
            if activity.owes_a_head() {
                // Nothing in progress and nothing owed to the client: close the socket now.
                return;
            }
            // Between requests: let hyper finish writing the last response, then close (an
            // HTTP/2 client is sent GOAWAY).
            if !stopping {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
        let deadline = activity.deadline(&limits);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
                return;
            }
            () = changed => {}
            () = sleep_until(deadline.map(|(at, _)| at)) => {
                if let Some((at, waiting_for)) = activity.deadline(&limits)
                    && at <= Instant::now()
                {
                    // Nothing in progress, so nothing is lost by closing the socket.
                    tracing::debug!(%peer, waiting_for, "closing a connection that outstayed its deadline");
                    return;
                }
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, as its deadlines and the connection limit see it.
struct Activity {
    phase: Mutex<Phase>,
    /// Told when the phase changes or the connection is asked to make room, so the connection
    /// looks again.
    changed: Notify,
    /// Asked to close to make room for a new connection (honoured only with no request in
    /// progress).
    evicted: AtomicBool,
    open: Arc<OpenConnections>,
}

struct Phase {
    /// Requests whose response has not been sent to its end.
    in_flight: usize,
    /// When the last response ended (or the connection was accepted).
    idle_since: Instant,
    /// When the head of the next request began to arrive; a new connection owes one at once.
    head_since: Option<Instant>,
}

impl Activity {
    fn new(open: Arc<OpenConnections>) -> Self {
        let now = Instant::now();
        Self {
            phase: Mutex::new(Phase { in_flight: 0, idle_since: now, head_since: Some(now) }),
            changed: Notify::new(),
            evicted: AtomicBool::new(false),
            open,
        }
    }

    /// Since when the connection has had no request in progress; none while it has one.
    fn idle_since(&self) -> Option<Instant> {
        let phase = self.phase();
        (phase.in_flight == 0).then_some(phase.idle_since)
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }

    /// Whether the connection is waiting for the head of a request (its first, or one whose
    /// first bytes have come), rather than between requests.
    fn owes_a_head(&self) -> bool {
        self.phase().head_since.is_some()
    }

    /// Whether the connection should close now to make room: it was asked to and has no
    /// request in progress. A request that began since the ask cancels it (the connection
    /// waiting for a place is told again when a connection becomes idle).
    fn take_eviction(&self) -> bool {
        if !self.evicted.swap(false, Ordering::SeqCst) {
            return false;
        }
        self.phase().in_flight == 0
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived.
    fn read(&self) {
        let mut phase = self.phase();
        if phase.in_flight == 0 && phase.head_since.is_none() {
            phase.head_since = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request's head is complete and it is being served.
    fn begin(self: &Arc<Self>) -> InFlight {
        let mut phase = self.phase();
        phase.in_flight += 1;
        phase.head_since = None;
        drop(phase);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection must close if nothing changes, and what it is waiting for; none
    /// while a request is in progress.
    fn deadline(&self, limits: &HttpLimits) -> Option<(Instant, &'static str)> {
        let phase = self.phase();
        if phase.in_flight > 0 {
            return None;
        }
        match phase.head_since {
            Some(at) if !limits.header_timeout.is_zero() => Some((at + limits.header_timeout, "request head")),
            Some(_) => None,
            None if !limits.idle_timeout.is_zero() => Some((phase.idle_since + limits.idle_timeout, "next request")),
            None => None,
        }
    }
}

/// A request in progress; dropped when its response has been sent to the end (or abandoned).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.in_flight = phase.in_flight.saturating_sub(1);
        let idle = phase.in_flight == 0;
        if idle {
            phase.idle_since = Instant::now();
            phase.head_since = None;
        }
        drop(phase);
        self.0.changed.notify_one();
        if idle {
            self.0.open.became_idle.notify_one();
        }
    }
}

/// A response body that keeps its request counted as in progress until hyper drops it.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling the connection's [`Activity`] when bytes arrive, and acknowledging them
/// at once.
///
/// The acknowledgement is for clients that leave Nagle's algorithm on and write a request in
/// two pieces (its head, then its body): their kernel holds the body until the head is
/// acknowledged. On a fresh connection Linux acknowledges at once anyway, but a keep-alive
/// connection that has answered requests is in its interactive ("pingpong") mode, where an
/// acknowledgement waits up to 40 ms for a response to ride on — and none comes, since the
/// response needs the body. Every request on such a connection then starts 40 ms late (issue
/// 27). `TCP_QUICKACK` after each read sends the pending acknowledgement now (the kernel clears
/// the flag by itself, so it is set again on every read).
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read();
            quickack(&this.stream);
        }
        polled
    }
}

impl AsyncWrite for Watched {
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

/// Acknowledges what the socket has received now rather than after the delayed-ACK timer (see
/// [`Watched`]). A failure only costs that delay.
#[cfg(target_os = "linux")]
fn quickack(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_tcp_quickack(true);
}

#[cfg(not(target_os = "linux"))]
fn quickack(_stream: &TcpStream) {}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HttpLimits =
        HttpLimits { header_timeout: Duration::from_secs(1), idle_timeout: Duration::from_secs(5), max_connections: 8 };

    #[test]
    fn a_new_connection_owes_a_head_within_the_header_timeout() {
        let activity = Activity::new(Arc::default());
        let (at, waiting_for) = activity.deadline(&LIMITS).unwrap();
        assert_eq!(waiting_for, "request head");
        assert!(at <= Instant::now() + LIMITS.header_timeout);
    }

    #[test]
    fn a_request_in_progress_has_no_deadline_and_its_end_starts_the_idle_one() {
        let activity = Arc::new(Activity::new(Arc::default()));
        let first = activity.begin();
        let second = activity.begin();
        assert_eq!(activity.deadline(&LIMITS), None);
        // Bytes while busy (a pipelined request) do not start a head deadline.
        activity.read();
        drop(first);
        assert_eq!(activity.deadline(&LIMITS), None, "one response still streaming");
        drop(second);
        let (at, waiting_for) = activity.deadline(&LIMITS).unwrap();
        assert_eq!(waiting_for, "next request");
        assert!(at > Instant::now() + LIMITS.header_timeout, "the idle timeout, not the header one");
        // The next request's first byte starts its head deadline.
        activity.read();
        assert_eq!(activity.deadline(&LIMITS).map(|(_, waiting_for)| waiting_for), Some("request head"));
    }

    /// Issue 27: a client with Nagle's algorithm on that writes a request's head and its body
    /// apart (as some HTTP clients do) had each request on a keep-alive connection held ~40 ms:
    /// its body waited for the head's acknowledgement, which the server's kernel delayed.
    #[tokio::test]
    async fn a_request_written_in_two_pieces_by_a_nagle_client_is_not_held_on_a_kept_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/echo", axum::routing::post(|body: Bytes| async move { body }));
        tokio::spawn(serve(listener, app, HttpLimits::default(), std::future::pending()));

        let mut client = TcpStream::connect(addr).await.unwrap();
        client.set_nodelay(false).unwrap(); // Nagle on, as a socket starts
        let body = br#"{"model": "switchyard", "stream": true}"#;
        let head = format!("POST /echo HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n\r\n", body.len());
        let mut took = Vec::new();
        for _ in 0..12 {
            let started = Instant::now();
            client.write_all(head.as_bytes()).await.unwrap();
            client.write_all(body).await.unwrap();
            let mut response = Vec::new();
            while !response.ends_with(body) {
                let mut chunk = [0_u8; 4096];
                let read = client.read(&mut chunk).await.unwrap();
                assert!(read > 0, "the connection closed: {}", String::from_utf8_lossy(&response));
                response.extend_from_slice(&chunk[..read]);
            }
            took.push(started.elapsed());
        }
        // The first requests of a connection are acknowledged at once anyway (quick-ack mode);
        // the later ones are those that waited.
        let mut kept = took[4..].to_vec();
        kept.sort();
        let median = kept[kept.len() / 2];
        assert!(median < Duration::from_millis(20), "median {median:?} per request on a kept connection: {took:?}");
    }

    #[test]
    fn the_connection_idle_longest_makes_room_and_a_busy_one_never_does() {
        let open = Arc::new(OpenConnections::default());
        let accept = || {
            let activity = Arc::new(Activity::new(open.clone()));
            // Distinct times of acceptance, oldest first.
            std::thread::sleep(Duration::from_millis(2));
            activity
        };
        let (busy, older, newer) = (accept(), accept(), accept());
        let _places = [open.register(busy.clone()), open.register(older.clone()), open.register(newer.clone())];
        let request = busy.begin();

        // The oldest connection is busy: the one idle longest after it is asked.
        assert!(open.evict_longest_idle());
        assert!(!busy.take_eviction() && !newer.take_eviction());
        assert!(older.take_eviction());
        assert!(!older.take_eviction(), "asked once");

        // A request begun after the ask cancels it.
        assert!(open.evict_longest_idle());
        let late = older.begin();
        assert!(!older.take_eviction(), "a connection with a request in progress stays");

        // Once every connection is busy, nobody is asked.
        let other = newer.begin();
        assert!(!open.evict_longest_idle());
        // A keep-alive connection whose request just ended is idle again, and may be asked.
        drop(request);
        assert!(open.evict_longest_idle());
        assert!(busy.take_eviction());
        drop((late, other));
    }

    #[test]
    fn zero_turns_a_timeout_off() {
        let activity = Arc::new(Activity::new(Arc::default()));
        let off = HttpLimits { header_timeout: Duration::ZERO, idle_timeout: Duration::ZERO, ..LIMITS };
        assert_eq!(activity.deadline(&off), None);
        drop(activity.begin());
        assert_eq!(activity.deadline(&off), None);
    }
}
