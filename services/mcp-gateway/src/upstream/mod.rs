//! Downstream MCP servers: each has a supervisor task that connects (spawning a stdio child
//! or opening a streamable HTTP session), lists its tools, resources and prompts, follows its
//! `list_changed` notifications, and reconnects with exponential backoff when it fails or
//! exits — a crashed stdio server is started again.
//!
//! While a server is reconnecting its last listing is kept, so clients do not see its tools
//! vanish and come back on every restart; a call to one of them gets a clear "restarting"
//! error until it is back.

pub mod config;

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use arc_swap::{ArcSwap, ArcSwapOption};
use chrono::{DateTime, Utc};
use rmcp::{
    ClientHandler, ServiceExt,
    model::{
        ClientCapabilities, ClientConfig, Implementation, NumberOrString, ProgressNotificationParam, ProgressToken,
        Prompt, ProtocolVersion, Resource, ResourceTemplate, Tool,
    },
    service::{NotificationContext, Peer, RoleClient, RoleServer},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::{io::AsyncBufReadExt, sync::mpsc};
use tokio_util::sync::CancellationToken;

pub use config::{Transport, UpstreamSpec};

/// Longest a connection attempt (spawn or HTTP, plus the initialize handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest listing a server's tools, resources or prompts may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// The gateway's environment variables a stdio server inherits (everything else must be
/// given in its `env`).
const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"];
/// A connection that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Reconnection delays: doubling from `initial` up to `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    fn delay(&self, failures: u32) -> Duration {
        self.initial.saturating_mul(2u32.saturating_pow(failures.min(16))).min(self.max)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Connecting,
    Ready,
    Restarting,
    Failed,
}

/// What `ListServers` reports for one server.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    pub name: String,
    pub transport: &'static str,
    pub state: ServerState,
    pub tool_count: usize,
    pub last_error: Option<String>,
    pub restarts: u32,
    pub connected_at: Option<DateTime<Utc>>,
    /// The stdio child's process id while it runs.
    pub pid: Option<u32>,
}

/// Everything a server offers, as last listed.
#[derive(Debug, Default)]
pub struct Listing {
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub resource_templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

/// One downstream server and its live connection.
pub struct Upstream {
    pub spec: UpstreamSpec,
    status: Mutex<ServerStatus>,
    peer: ArcSwapOption<Peer<RoleClient>>,
    listing: ArcSwap<Listing>,
}

impl Upstream {
    fn new(spec: UpstreamSpec) -> Self {
        let status = ServerStatus {
            name: spec.name.clone(),
            transport: spec.transport.kind(),
            state: ServerState::Connecting,
            tool_count: 0,
            last_error: None,
            restarts: 0,
            connected_at: None,
            pid: None,
        };
        Self {
            spec,
            status: Mutex::new(status),
            peer: ArcSwapOption::empty(),
            listing: ArcSwap::from_pointee(Listing::default()),
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn status(&self) -> ServerStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    pub fn listing(&self) -> Arc<Listing> {
        self.listing.load_full()
    }

    /// The connection to call through, or why there is none.
    pub fn peer(&self) -> Result<Arc<Peer<RoleClient>>, String> {
        self.peer.load_full().ok_or_else(|| {
            let status = self.status();
            let why = status.last_error.map(|e| format!(": {e}")).unwrap_or_default();
            match status.state {
                ServerState::Failed => format!("server `{}` is unavailable{why}", self.spec.name),
                _ => format!("server `{}` is not connected yet (restarting){why}", self.spec.name),
            }
        })
    }

    fn update(&self, change: impl FnOnce(&mut ServerStatus)) {
        let mut guard = self.status.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        change(&mut guard);
    }
}

/// What a server told us changed.
#[derive(Debug, Clone, Copy)]
enum ListChanged {
    Tools,
    Resources,
    Prompts,
}

/// Progress of calls in flight: the token the gateway sent downstream → the client that made
/// the call and the token it chose. Tokens are rewritten because two clients may pick the same.
#[derive(Default)]
pub struct ProgressRelay {
    calls: Mutex<HashMap<String, (Peer<RoleServer>, ProgressToken)>>,
}

impl ProgressRelay {
    /// Relays progress sent under `upstream_token` by `server` to `peer` under `token`, until
    /// the guard is dropped (the call finished).
    pub fn register(
        self: &Arc<Self>,
        server: &str,
        upstream_token: &ProgressToken,
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> ProgressGuard {
        let key = relay_key(server, upstream_token);
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), (peer, token));
        ProgressGuard { relay: self.clone(), key }
    }

    async fn forward(&self, server: &str, mut params: ProgressNotificationParam) {
        let key = relay_key(server, &params.progress_token);
        let target = self.calls.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        if let Some((peer, token)) = target {
            params.progress_token = token;
            let _ = peer.notify_progress(params).await;
        }
    }
}

/// Each connection numbers its own progress tokens, so the server is part of the key.
fn relay_key(server: &str, token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(s) => format!("{server}\u{0}s{s}"),
        NumberOrString::Number(n) => format!("{server}\u{0}n{n}"),
    }
}

pub struct ProgressGuard {
    relay: Arc<ProgressRelay>,
    key: String,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.relay.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
}

/// Our side of each downstream connection: forwards `list_changed` notifications to the
/// supervisor and progress to the client whose call it is.
#[derive(Clone)]
struct UpstreamClient {
    server: String,
    changes: mpsc::UnboundedSender<ListChanged>,
    progress: Arc<ProgressRelay>,
}

impl ClientHandler for UpstreamClient {
    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.forward(&self.server, params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changes.send(ListChanged::Tools);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changes.send(ListChanged::Resources);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changes.send(ListChanged::Prompts);
    }

    fn get_info(&self) -> ClientConfig {
        // Most servers today still expect the initialize handshake.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("switchyard-mcp-gateway", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// All downstream servers. `changed` ticks whenever any listing changes.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    changed: tokio::sync::watch::Sender<u64>,
    progress: Arc<ProgressRelay>,
}

impl Upstreams {
    /// Starts a supervisor for each server; they run until `shutdown` is cancelled.
    pub fn start(specs: Vec<UpstreamSpec>, backoff: Backoff, shutdown: CancellationToken) -> Arc<Self> {
        // HTTPS to downstream servers uses rustls with the ring provider (the one TLS stack of
        // the workspace); installing it is a no-op when the process already has a provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (changed, _) = tokio::sync::watch::channel(0);
        let set = Arc::new(Self {
            servers: specs.into_iter().map(|s| Arc::new(Upstream::new(s))).collect(),
            changed,
            progress: Arc::default(),
        });
        for upstream in &set.servers {
            tokio::spawn(supervise(upstream.clone(), set.clone(), backoff, shutdown.clone()));
        }
        set
    }

    pub fn servers(&self) -> &[Arc<Upstream>] {
        &self.servers
    }

    pub fn progress(&self) -> &Arc<ProgressRelay> {
        &self.progress
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.servers.iter().find(|s| s.spec.name == name)
    }

    /// Ticks on every listing change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn notify(&self) {
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// Waits until every server has connected at least once or failed, up to `timeout`.
    pub async fn settled(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let pending = self.servers.iter().any(|s| {
                let status = s.status();
                status.connected_at.is_none() && status.state == ServerState::Connecting
            });
            if !pending {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn supervise(upstream: Arc<Upstream>, set: Arc<Upstreams>, backoff: Backoff, shutdown: CancellationToken) {
    let name = upstream.spec.name.clone();
    let mut failures: u32 = 0;
    loop {
        let (changes_tx, mut changes) = mpsc::unbounded_channel();
        // In its own task, so even a panic in a transport is a failed attempt, not a dead
        // supervisor.
        let connecting = tokio::spawn({
            let upstream = upstream.clone();
            let client = UpstreamClient { server: name.clone(), changes: changes_tx, progress: set.progress.clone() };
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
        if let Err(err) = refresh(&upstream, &peer, None).await {
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
        set.notify();

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
                    match refresh(&upstream, &peer, Some(change)).await {
                        Ok(()) => {
                            upstream.update(|s| s.tool_count = upstream.listing().tools.len());
                            tracing::info!(server = %name, ?change, "list changed");
                            set.notify();
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

type Running = rmcp::service::RunningService<RoleClient, UpstreamClient>;

async fn connect(upstream: &Upstream, client: UpstreamClient) -> Result<Running, String> {
    match &upstream.spec.transport {
        Transport::Stdio { command, args, env, cwd } => {
            let mut cmd = tokio::process::Command::new(command);
            // A server gets a clean environment plus its own `env`: the gateway's secrets
            // (DATABASE_URL, tokens) are not a tool's business, and some servers expose their
            // environment through a tool.
            cmd.env_clear()
                .envs(std::env::vars().filter(|(name, _)| INHERITED_ENV.contains(&name.as_str())))
                .envs(env)
                .args(args)
                .kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let (process, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|err| format!("cannot start `{command}`: {err}"))?;
            let pid = process.id();
            if let Some(stderr) = stderr {
                // A server's own log lines, kept apart from ours but not lost.
                let name = upstream.spec.name.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %name, "{line}");
                    }
                });
            }
            upstream.update(|s| s.pid = pid);
            client.serve(process).await.map_err(|err| format!("initialize failed: {err}"))
        }
        Transport::Http { url, headers } => {
            let headers = headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((http::HeaderName::try_from(k.as_str()).ok()?, http::HeaderValue::try_from(v.as_str()).ok()?))
                })
                .collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            client.serve(transport).await.map_err(|err| format!("initialize failed: {err}"))
        }
    }
}

/// Re-lists what changed (everything when `change` is `None`), as the server's capabilities
/// allow.
async fn refresh(upstream: &Upstream, peer: &Peer<RoleClient>, change: Option<ListChanged>) -> Result<(), String> {
    let capabilities = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let current = upstream.listing();
    let all = change.is_none();
    let timed = |what: &'static str| move |err: String| format!("listing {what}: {err}");
    let tools = if (all || matches!(change, Some(ListChanged::Tools))) && capabilities.tools.is_some() {
        within(peer.list_all_tools()).await.map_err(timed("tools"))?
    } else {
        current.tools.clone()
    };
    let wants_resources = (all || matches!(change, Some(ListChanged::Resources))) && capabilities.resources.is_some();
    let (resources, resource_templates) = if wants_resources {
        // Templates are optional even for servers with resources; an error there is not fatal.
        let resources = within(peer.list_all_resources()).await.map_err(timed("resources"))?;
        let templates = within(peer.list_all_resource_templates()).await.unwrap_or_default();
        (resources, templates)
    } else {
        (current.resources.clone(), current.resource_templates.clone())
    };
    let prompts = if (all || matches!(change, Some(ListChanged::Prompts))) && capabilities.prompts.is_some() {
        within(peer.list_all_prompts()).await.map_err(timed("prompts"))?
    } else {
        current.prompts.clone()
    };
    upstream.listing.store(Arc::new(Listing { tools, resources, resource_templates, prompts }));
    Ok(())
}

async fn within<T, E: std::fmt::Display>(call: impl Future<Output = Result<T, E>>) -> Result<T, String> {
    match tokio::time::timeout(LIST_TIMEOUT, call).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(_) => Err(format!("no answer within {LIST_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2) };
        assert_eq!(backoff.delay(0), Duration::from_millis(100));
        assert_eq!(backoff.delay(3), Duration::from_millis(800));
        assert_eq!(backoff.delay(10), Duration::from_secs(2));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(2));
    }
}
