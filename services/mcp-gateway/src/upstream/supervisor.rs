//! Each server's supervisor: connect over its transport within a deadline, list what it
//! offers, follow its changes while the connection lasts, and reconnect with exponential
//! backoff when it fails or exits.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    ServerState, Transport, Upstream, Upstreams,
    client::{self, Running, UpstreamClient},
    http, stdio,
};

/// Longest a connection attempt (spawn or HTTP, plus the initialize handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Reconnection delays: doubling from `initial` up to `max`, jittered so replicas that lost
/// a server together do not reconnect in lockstep.
pub use switchyard_kit::backoff::Backoff;

/// Keeps one server connected until `shutdown`: each failed attempt or lost connection waits
/// out the backoff and tries again.
pub(super) async fn supervise(
    upstream: Arc<Upstream>,
    set: Arc<Upstreams>,
    backoff: Backoff,
    shutdown: CancellationToken,
) {
    let name = upstream.spec.name.clone();
    let mut failures: u32 = 0;
    loop {
        let (changes_tx, mut changes) = mpsc::unbounded_channel();
        // In its own task, so even a panic in a transport is a failed attempt, not a dead
        // supervisor.
        let connecting = tokio::spawn({
            let upstream = upstream.clone();
            let client = UpstreamClient {
                server: name.clone(),
                changes: changes_tx,
                relay: set.relay.clone(),
                subscriptions: set.subscriptions.clone(),
            };
            async move { connect(&upstream, client).await }
        });
        let abort = connecting.abort_handle();
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => {
                abort.abort();
                return;
            }
            attempt = tokio::time::timeout(CONNECT_TIMEOUT, connecting) => attempt,
        };
        let running = match attempt {
            Ok(Ok(Ok(running))) => running,
            Ok(Err(panicked)) => {
                failed(&upstream, &name, format!("connecting failed: {panicked}"), &mut failures);
                if !sleep_or_shutdown(backoff.delay(failures - 1), &shutdown).await {
                    return;
                }
                continue;
            }
            Ok(Ok(Err(err))) => {
                failed(&upstream, &name, err, &mut failures);
                if !sleep_or_shutdown(backoff.delay(failures - 1), &shutdown).await {
                    return;
                }
                continue;
            }
            Err(_) => {
                abort.abort();
                failed(&upstream, &name, format!("no answer within {CONNECT_TIMEOUT:?}"), &mut failures);
                if !sleep_or_shutdown(backoff.delay(failures - 1), &shutdown).await {
                    return;
                }
                continue;
            }
        };
        let peer = Arc::new(running.peer().clone());
        let connected = Instant::now();
        let before = upstream.listing();
        if let Err(err) = client::refresh(&upstream, &peer, None).await {
            tracing::warn!(server = %name, error = %err, "listing failed; will retry on the next change");
        }
        upstream.peer.store(Some(peer.clone()));
        upstream.update(|s| {
            s.state = ServerState::Ready;
            s.last_error = None;
            s.connected_at = Some(Utc::now());
            s.tool_count = upstream.listing().tools.len();
        });
        tracing::info!(server = %name, tools = upstream.listing().tools.len(), "connected");
        set.notify(&upstream.listing().changes_from(&before));
        // A new connection holds none of the old one's subscriptions.
        client::resubscribe(&name, &peer, set.subscriptions.renew(&name, None)).await;

        let cancel = running.cancellation_token();
        let mut waiting = std::pin::pin!(running.waiting());
        let reason = loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    cancel.cancel();
                    let _ = waiting.await;
                    return;
                }
                reason = &mut waiting => break reason,
                Some(change) = changes.recv() => {
                    let before = upstream.listing();
                    match client::refresh(&upstream, &peer, Some(change)).await {
                        Ok(()) => {
                            upstream.update(|s| s.tool_count = upstream.listing().tools.len());
                            tracing::info!(server = %name, ?change, "list changed");
                            set.notify(&upstream.listing().changes_from(&before));
                        }
                        Err(err) => tracing::warn!(server = %name, error = %err, "re-listing failed"),
                    }
                }
            }
        };
        upstream.peer.store(None);
        if connected.elapsed() >= STABLE_AFTER {
            failures = 0;
        }
        let why = match reason {
            Ok(reason) => format!("connection closed ({reason:?})"),
            Err(err) => format!("connection task ended: {err}"),
        };
        failed(&upstream, &name, why, &mut failures);
        if !sleep_or_shutdown(backoff.delay(failures - 1), &shutdown).await {
            return;
        }
    }
}

fn failed(upstream: &Upstream, name: &str, error: impl std::fmt::Display, failures: &mut u32) {
    let error = error.to_string();
    let was_connected = upstream.status().connected_at.is_some();
    *failures += 1;
    upstream.update(|s| {
        s.state = if was_connected || *failures < 3 { ServerState::Restarting } else { ServerState::Failed };
        if was_connected {
            s.restarts += 1;
        }
        s.pid = None;
        s.last_error = Some(error.clone());
    });
    tracing::warn!(server = %name, error = %error, failures = *failures, "server unavailable; reconnecting");
}

/// Sleeps, unless shutdown comes first (then returns false).
async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(delay) => true,
    }
}

/// One connection attempt, over the server's transport.
async fn connect(upstream: &Upstream, client: UpstreamClient) -> Result<Running, String> {
    match &upstream.spec.transport {
        Transport::Stdio { command, args, env, cwd } => {
            stdio::connect(upstream, client, command, args, env, cwd.as_deref()).await
        }
        Transport::Http { url, .. } => {
            let credentials = upstream.credentials().ok_or("an HTTP server without credentials")?;
            http::connect(client, url, credentials.clone()).await
        }
    }
}
