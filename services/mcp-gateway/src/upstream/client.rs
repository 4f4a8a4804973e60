//! Our side of each upstream connection: the handler that hears a server's `list_changed`
//! notifications, relays what it sends during a call to the calling client (progress, log
//! messages, sampling, elicitation and roots requests — see `relay`), passes its resource
//! updates to the sessions subscribed to them (`subscriptions`), and the listing of what the
//! server offers.

#![allow(
    deprecated,
    reason = "sampling, roots, logging and resource subscriptions are deprecated by the 2026-07-28 revision, and still what session-based clients and servers use"
)]

use std::{sync::Arc, time::Duration};

use rmcp::{
    ClientHandler, ErrorData as McpError,
    model::{
        ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationCapability, Implementation,
        ListRootsRequest, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
        ResourceUpdatedNotificationParam, RootsCapabilities, SamplingCapability, ServerRequest, SubscribeRequestParams,
        UnsubscribeRequestParams,
    },
    service::{NotificationContext, Peer, RequestContext, RoleClient},
};
use tokio::sync::mpsc;

use super::{Downstream, Listing, Relay, Subscriptions, Upstream, relay::Delivery};

/// Longest listing a server's tools, resources or prompts may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);

/// A running connection to one server.
pub(super) type Running = rmcp::service::RunningService<RoleClient, UpstreamClient>;

/// A kind of listing: what a server said changed, or what a new listing of it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListChanged {
    Tools,
    Resources,
    Prompts,
}

/// The handler of one connection: forwards `list_changed` notifications to the supervisor
/// and what belongs to a call to the client whose call it is.
#[derive(Clone)]
pub(super) struct UpstreamClient {
    pub(super) server: String,
    pub(super) changes: mpsc::UnboundedSender<ListChanged>,
    pub(super) relay: Arc<Relay>,
    pub(super) subscriptions: Arc<Subscriptions>,
}

impl UpstreamClient {
    /// Asks the calling client what the server asked, or tells the server why nobody can answer.
    async fn ask_caller(&self, request: ServerRequest) -> Result<ClientResult, McpError> {
        let what = request_name(&request);
        let caller = self.relay.caller_on(&self.server).map_err(|why| {
            tracing::warn!(server = %self.server, request = what, %why, "a server's request to the client was refused");
            McpError::internal_error(format!("switchyard-mcp-gateway could not relay {what}: {why}"), None)
        })?;
        caller.request(request).await
    }
}

fn request_name(request: &ServerRequest) -> &'static str {
    match request {
        ServerRequest::CreateMessageRequest(_) => "sampling/createMessage",
        ServerRequest::ElicitRequest(_) => "elicitation/create",
        ServerRequest::ListRootsRequest(_) => "roots/list",
        _ => "a request",
    }
}

impl ClientHandler for UpstreamClient {
    async fn on_progress(&self, params: ProgressNotificationParam, context: NotificationContext<RoleClient>) {
        // Routed as it arrived (see `relay`); held until passed on, so the call waits for it.
        if let Some(delivery) = context.extensions.get::<Delivery>() {
            delivery.caller().progress(params).await;
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        if let Some(delivery) = context.extensions.get::<Delivery>() {
            delivery.caller().log(params).await;
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.ask_caller(request).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(McpError::internal_error("the client answered sampling with another result", None)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        match self.ask_caller(ServerRequest::ElicitRequest(ElicitRequest::new(params))).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(McpError::internal_error("the client answered elicitation with another result", None)),
        }
    }

    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, McpError> {
        match self.ask_caller(ServerRequest::ListRootsRequest(ListRootsRequest::default())).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(McpError::internal_error("the client answered roots/list with another result", None)),
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let mut gone = Vec::new();
        for (session, subscriber) in self.subscriptions.subscribers(&self.server, &params.uri) {
            if !subscriber.resource_updated(params.clone()).await {
                gone.push(session);
            }
        }
        // Sessions whose connection closed without unsubscribing: drop them, and the
        // upstream subscription with the last of them.
        for session in gone {
            if self.subscriptions.remove(&self.server, &params.uri, &session) {
                unsubscribe(&self.server, &context.peer, &params.uri, &self.subscriptions).await;
            }
        }
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
        // The gateway can answer what its clients can: it relays these requests to the caller,
        // which refuses what it does not support.
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        capabilities.elicitation = Some(ElicitationCapability::default());
        capabilities.roots = Some(RootsCapabilities::default());
        // Most servers today still expect the initialize handshake.
        ClientConfig::new(capabilities, Implementation::new("switchyard-mcp-gateway", env!("CARGO_PKG_VERSION")))
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

/// Makes `renewed` upstream subscriptions of `server` again on `peer` (the URIs clients are
/// subscribed to, as [`Subscriptions::renew`] hands them back).
pub(super) async fn resubscribe(server: &str, peer: &Peer<RoleClient>, renewed: Vec<(String, Arc<Downstream>)>) {
    for (uri, downstream) in renewed {
        match downstream.ensure(within(peer.subscribe(SubscribeRequestParams::new(uri.clone())))).await {
            Ok(()) => tracing::debug!(server, %uri, "resource subscription made again"),
            Err(err) => tracing::warn!(server, %uri, error = %err, "resource subscription lost"),
        }
    }
}

/// Ends the connection's subscription to `uri`, which no client holds any more. A refusal is
/// logged: the server's later updates for it then find nobody to tell. A client that subscribed
/// while this was under way may have had its subscribe reach the server first, so whoever holds
/// the URI by the end has it made again.
pub(super) async fn unsubscribe(server: &str, peer: &Peer<RoleClient>, uri: &str, subscriptions: &Subscriptions) {
    if let Err(err) = within(peer.unsubscribe(UnsubscribeRequestParams::new(uri))).await {
        tracing::warn!(server, uri, error = %err, "ending a resource subscription upstream");
    }
    resubscribe(server, peer, subscriptions.renew(server, Some(uri))).await;
}

async fn within<T, E: std::fmt::Display>(call: impl Future<Output = Result<T, E>>) -> Result<T, String> {
    match tokio::time::timeout(LIST_TIMEOUT, call).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(_) => Err(format!("no answer within {LIST_TIMEOUT:?}")),
    }
}
