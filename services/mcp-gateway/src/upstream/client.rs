//! Our side of each downstream connection: the handler that hears a server's `list_changed`
//! and progress notifications, and the listing of what the server offers.

use std::{sync::Arc, time::Duration};

use rmcp::{
    ClientHandler,
    model::{ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion},
    service::{NotificationContext, Peer, RoleClient},
};
use tokio::sync::mpsc;

use super::{Listing, ProgressRelay, Upstream};

/// Longest listing a server's tools, resources or prompts may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);

/// A running connection to one server.
pub(super) type Running = rmcp::service::RunningService<RoleClient, UpstreamClient>;

/// What a server told us changed.
#[derive(Debug, Clone, Copy)]
pub(super) enum ListChanged {
    Tools,
    Resources,
    Prompts,
}

/// The handler of one connection: forwards `list_changed` notifications to the supervisor
/// and progress to the client whose call it is.
#[derive(Clone)]
pub(super) struct UpstreamClient {
    pub(super) server: String,
    pub(super) changes: mpsc::UnboundedSender<ListChanged>,
    pub(super) progress: Arc<ProgressRelay>,
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

/// Re-lists what changed (everything when `change` is `None`), as the server's capabilities
/// allow.
pub(super) async fn refresh(
    upstream: &Upstream,
    peer: &Peer<RoleClient>,
    change: Option<ListChanged>,
) -> Result<(), String> {
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
