//! Downstream MCP servers: each has a supervisor task that connects (spawning a stdio child
//! or opening a streamable HTTP session), lists its tools, resources and prompts, follows its
//! `list_changed` notifications, and reconnects with exponential backoff when it fails or
//! exits — a crashed stdio server is started again.
//!
//! While a server is reconnecting its last listing is kept, so clients do not see its tools
//! vanish and come back on every restart; a call to one of them gets a clear "restarting"
//! error until it is back.
//!
//! Here: the servers and their state. The supervision loop is in `supervisor`, our side of a
//! connection in `client`, each transport in `stdio` and `http` (an HTTP server's headers and
//! OAuth token in `credentials`), relaying what a server sends
//! during a call (progress, logs, its requests to the client) in `relay`, which clients hear
//! of a resource's changes in `subscriptions`.

mod client;
pub mod config;
mod credentials;
mod http;
mod relay;
mod stdio;
mod subscriptions;
mod supervisor;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use arc_swap::{ArcSwap, ArcSwapOption};
use chrono::{DateTime, Utc};
use rmcp::{
    model::{Prompt, Resource, ResourceTemplate, Tool},
    service::{Peer, RoleClient},
};
use tokio_util::sync::CancellationToken;

pub use client::ListChanged;
pub use config::{Transport, UpstreamSpec};
pub use credentials::Credentials;
pub use relay::{CallGuard, Caller, NoCaller, Relay};
pub use subscriptions::{Downstream, Subscriber, Subscriptions};
pub use supervisor::Backoff;

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

impl Listing {
    /// Which kinds differ from `before` (what clients are told changed).
    fn changes_from(&self, before: &Listing) -> Vec<ListChanged> {
        let mut changed = Vec::new();
        if self.tools != before.tools {
            changed.push(ListChanged::Tools);
        }
        if self.resources != before.resources || self.resource_templates != before.resource_templates {
            changed.push(ListChanged::Resources);
        }
        if self.prompts != before.prompts {
            changed.push(ListChanged::Prompts);
        }
        changed
    }
}

/// One upstream server and its live connection.
pub struct Upstream {
    pub spec: UpstreamSpec,
    status: Mutex<ServerStatus>,
    peer: ArcSwapOption<Peer<RoleClient>>,
    listing: ArcSwap<Listing>,
    /// An HTTP server's headers and token, kept across its connections (a token outlives one).
    credentials: Option<Arc<Credentials>>,
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
        let credentials = match &spec.transport {
            Transport::Http { headers, oauth, .. } => {
                Some(Arc::new(Credentials::new(&spec.name, headers.clone(), oauth.clone())))
            }
            Transport::Stdio { .. } => None,
        };
        Self {
            spec,
            status: Mutex::new(status),
            peer: ArcSwapOption::empty(),
            listing: ArcSwap::from_pointee(Listing::default()),
            credentials,
        }
    }

    /// An HTTP server's credentials (none for a stdio server).
    pub fn credentials(&self) -> Option<&Arc<Credentials>> {
        self.credentials.as_ref()
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

/// All upstream servers. `changed` ticks whenever any listing changes.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    changed: tokio::sync::watch::Sender<u64>,
    relay: Arc<Relay>,
    subscriptions: Arc<Subscriptions>,
    /// Which kind of listing changed, for the clients that asked to hear of it.
    listings: tokio::sync::broadcast::Sender<ListChanged>,
}

impl Upstreams {
    /// Starts a supervisor for each server; they run until `shutdown` is cancelled.
    pub fn start(specs: Vec<UpstreamSpec>, backoff: Backoff, shutdown: CancellationToken) -> Arc<Self> {
        // HTTPS to upstream servers needs the process's rustls provider (a no-op when the
        // binary installed it already).
        switchyard_kit::tls::install_crypto_provider();
        let (changed, _) = tokio::sync::watch::channel(0);
        let set = Arc::new(Self {
            servers: specs.into_iter().map(|s| Arc::new(Upstream::new(s))).collect(),
            changed,
            relay: Arc::default(),
            subscriptions: Arc::default(),
            listings: tokio::sync::broadcast::channel(64).0,
        });
        for upstream in &set.servers {
            tokio::spawn(supervisor::supervise(upstream.clone(), set.clone(), backoff.clone(), shutdown.clone()));
        }
        set
    }

    pub fn servers(&self) -> &[Arc<Upstream>] {
        &self.servers
    }

    pub fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }

    pub fn subscriptions(&self) -> &Arc<Subscriptions> {
        &self.subscriptions
    }

    /// Ends the upstream subscriptions that no client holds any more (`(server, uri)`
    /// pairs, as [`Subscriptions`] hands them back). A server that is down has lost them
    /// already.
    pub async fn release(&self, emptied: Vec<(String, String)>) {
        for (server, uri) in emptied {
            if let Some(peer) = self.get(&server).and_then(|upstream| upstream.peer().ok()) {
                client::unsubscribe(&server, &peer, &uri, &self.subscriptions).await;
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.servers.iter().find(|s| s.spec.name == name)
    }

    /// Ticks on every listing change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Hears which kind of listing changed on any server (a receiver that lags has missed some:
    /// it should take every kind as changed).
    pub fn subscribe_listings(&self) -> tokio::sync::broadcast::Receiver<ListChanged> {
        self.listings.subscribe()
    }

    /// A server was listed again (it connected, or said something changed): the catalog is
    /// rebuilt, and the kinds in `changed` — those that really differ — are announced.
    fn notify(&self, changed: &[ListChanged]) {
        self.changed.send_modify(|generation| *generation += 1);
        for kind in changed {
            // Nobody listening is fine.
            let _ = self.listings.send(*kind);
        }
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
