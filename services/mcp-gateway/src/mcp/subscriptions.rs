//! Resource subscriptions: a session's `resources/subscribe` and `resources/unsubscribe`, and
//! a stateless client's `subscriptions/listen`, each sharing one downstream subscription per
//! resource however many clients hold it (see [`crate::upstream::Subscriptions`]).

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError,
    model::{ResourceUpdatedNotificationParam, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams},
    service::{Peer, RequestContext, RoleServer, SubscriptionContext, SubscriptionSink},
};

use super::{McpHandler, changes::ListChanges};
use crate::{
    config::ToolMode,
    upstream::{ListChanged, Subscriber, Upstream},
};

impl McpHandler {
    /// the handler anyway.)
    fn subscribing_session(&self, context: &RequestContext<RoleServer>, what: &str) -> Result<String, McpError> {
        match self.session_key(&context.extensions)? {
            Some(key) => Ok(key.store_key()),
            None => Err(McpError::invalid_request(
                format!(
                    "{what} needs an MCP session (protocol revisions up to 2025-11-25): a request without one \
                     has no stream for notifications/resources/updated"
                ),
                None,
            )),
        }
    }

    /// `subscriptions/listen` (2026-07-28): the notification channel of a client without a
    /// session. It hears of tool-list changes (not in search mode, whose list never changes),
    /// resource and prompt list changes, and updates of the resources it names — those some
    /// server offers and can be subscribed to at; the acknowledged filter leaves out the rest.
    pub(super) fn accepted_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if self.mode() == ToolMode::Search {
            accepted.tools_list_changed = None;
        }
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            uris.retain(|uri| self.resource_owner(uri).is_ok_and(|server| supports_subscriptions(&server)));
        }
        Some(accepted)
    }

    /// Runs one `subscriptions/listen` until the client cancels it or its stream closes. Its
    /// resource subscriptions share the downstream ones of session clients (see
    /// [`crate::upstream::Subscriptions`]) and end with it; a listen keyed to a context (see
    /// [`crate::scope`]) also hears that context being set.
    pub(super) async fn listen_for_changes(&self, context: SubscriptionContext) -> Result<(), McpError> {
        // A listen carrying a context handle in `_meta` (or from an authenticated caller) is
        // told when that context is set again, as a session client is after its set_context.
        let scope = self.scope(context.request_context())?;
        let sink = context.sink().clone();
        let accepted = context.accepted().clone();
        let upstreams = self.gateway.upstreams();
        let listener = format!("listen-{}", uuid::Uuid::new_v4());
        let subscriber: Arc<dyn Subscriber> = Arc::new(ListenSubscriber(sink.clone()));
        for uri in accepted.resource_subscriptions.iter().flatten() {
            let Ok(server) = self.resource_owner(uri) else { continue };
            let downstream = upstreams.subscriptions().add(server.name(), uri, &listener, subscriber.clone());
            // A server that is down is subscribed when it is back (the supervisor).
            let Ok(peer) = server.peer() else { continue };
            #[allow(deprecated, reason = "servers behind the gateway still use legacy subscriptions")]
            let subscribe = self.forwarded(
                server.name(),
                "resources/subscribe",
                peer.subscribe(SubscribeRequestParams::new(uri.clone())),
            );
            if let Err(err) = downstream.ensure(subscribe).await {
                tracing::warn!(server = %server.name(), %uri, error = %err.message, "subscribing downstream for a listener");
            }
        }
        let wanted = |kind: ListChanged| {
            let flag = match kind {
                ListChanged::Tools => accepted.tools_list_changed,
                ListChanged::Resources => accepted.resources_list_changed,
                ListChanged::Prompts => accepted.prompts_list_changed,
            };
            flag == Some(true)
        };
        tokio::select! {
            () = context.cancelled() => {}
            () = ListChanges::new(&self.gateway).with_context(&self.gateway, scope.key()).tell(&sink, wanted) => {}
        }
        upstreams.release(upstreams.subscriptions().end_session(&listener)).await;
        Ok(())
    }

    /// Subscribes this session to a resource: the owning server's
    /// `notifications/resources/updated` for it reach this session (and only the sessions
    /// subscribed), over one downstream subscription however many sessions hold it.
    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    pub(super) async fn subscribe_session(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let session = self.subscribing_session(&context, "resources/subscribe")?;
        let server = self.resource_owner(&request.uri)?;
        let peer = server.peer().map_err(|why| McpError::internal_error(why, None))?;
        let subscriptions = self.gateway.upstreams().subscriptions();
        let subscriber = Arc::new(ClientSubscriber { peer: context.peer.clone() });
        let downstream = subscriptions.add(server.name(), &request.uri, &session, subscriber);
        // The first subscriber makes the downstream subscription; any who come meanwhile wait
        // for it, so none is told it is subscribed while the server refused.
        let subscribe = self.forwarded(server.name(), "resources/subscribe", peer.subscribe(request.clone()));
        if let Err(err) = downstream.ensure(subscribe).await {
            subscriptions.remove(server.name(), &request.uri, &session);
            return Err(err);
        }
        Ok(())
    }

    /// Takes this session off a resource; the downstream subscription ends with its last
    /// subscriber. Unsubscribing from a resource the session does not hold is not an error.
    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    pub(super) async fn unsubscribe_session(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let session = self.subscribing_session(&context, "resources/unsubscribe")?;
        let upstreams = self.gateway.upstreams();
        upstreams.release(upstreams.subscriptions().leave(&request.uri, &session)).await;
        Ok(())
    }
}

/// A `subscriptions/listen` that named resources: their updates go down its stream.
struct ListenSubscriber(SubscriptionSink);

#[async_trait::async_trait]
impl Subscriber for ListenSubscriber {
    async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) -> bool {
        self.0.notify_resource_updated(params.uri).await.is_ok()
    }
}

/// A session subscribed to resources: the owning server's updates go to its client.
struct ClientSubscriber {
    peer: Peer<RoleServer>,
}

#[async_trait::async_trait]
impl Subscriber for ClientSubscriber {
    async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) -> bool {
        self.peer.notify_resource_updated(params).await.is_ok()
    }
}

/// Whether `server` takes resource subscriptions (a server that is not connected is given the
/// benefit of the doubt: it is subscribed to when it is back).
fn supports_subscriptions(server: &Upstream) -> bool {
    let Ok(peer) = server.peer() else { return true };
    let Some(info) = peer.peer_info() else { return true };
    info.capabilities.resources.as_ref().is_some_and(|resources| resources.subscribe == Some(true))
}
