//! List-change fan-out: which `notifications/*/list_changed` a client hears and when — from a
//! session's peer (for its whole life) or down a `subscriptions/listen` stream.

use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::{gateway::Gateway, store::SessionKey, upstream::ListChanged};

/// The list changes a client hears of: the published tool catalog (the tools clients are
/// shown: a server's own tool list only matters once the catalog built from it changes),
/// servers' resources and prompts, and for a stateless listener keyed to a context (a handle,
/// or the authenticated caller) that context being set again, which changes its filtered list.
pub(super) struct ListChanges {
    catalog: broadcast::Receiver<()>,
    listings: broadcast::Receiver<ListChanged>,
    context: Option<(SessionKey, broadcast::Receiver<SessionKey>)>,
}

impl ListChanges {
    pub(super) fn new(gateway: &Gateway) -> Self {
        Self { catalog: gateway.subscribe_catalog(), listings: gateway.upstreams().subscribe_listings(), context: None }
    }

    /// Also tells of `key`'s context being set (session clients are told by their own
    /// `set_context` call instead).
    pub(super) fn with_context(mut self, gateway: &Gateway, key: Option<&SessionKey>) -> Self {
        self.context = key.map(|key| (key.clone(), gateway.subscribe_contexts()));
        self
    }

    /// The kinds that changed next (every kind a lagging receiver may have missed), or None
    /// once the gateway shuts down.
    async fn next(&mut self) -> Option<&'static [ListChanged]> {
        loop {
            let context_set = async {
                match &mut self.context {
                    Some((key, contexts)) => match contexts.recv().await {
                        Ok(set) => Some(set == *key),
                        // Ours may be among those missed.
                        Err(RecvError::Lagged(_)) => Some(true),
                        Err(RecvError::Closed) => None,
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.catalog.recv() => return match changed {
                    Ok(()) | Err(RecvError::Lagged(_)) => Some(&[ListChanged::Tools]),
                    Err(RecvError::Closed) => None,
                },
                changed = self.listings.recv() => match changed {
                    Ok(ListChanged::Resources) => return Some(&[ListChanged::Resources]),
                    Ok(ListChanged::Prompts) => return Some(&[ListChanged::Prompts]),
                    Ok(ListChanged::Tools) => {}
                    Err(RecvError::Lagged(_)) => return Some(&[ListChanged::Resources, ListChanged::Prompts]),
                    Err(RecvError::Closed) => return None,
                },
                ours = context_set => match ours {
                    Some(true) => return Some(&[ListChanged::Tools]),
                    Some(false) => {}
                    None => return None,
                },
            }
        }
    }

    /// Tells `client` of every change it `wants`, until the gateway shuts down or the client
    /// is gone.
    pub(super) async fn tell(mut self, client: &impl ChangeListener, wants: impl Fn(ListChanged) -> bool) {
        while let Some(kinds) = self.next().await {
            for kind in kinds.iter().copied().filter(|kind| wants(*kind)) {
                if !client.list_changed(kind).await {
                    return;
                }
            }
        }
    }
}

/// Where list changes go: a session's peer, or a `subscriptions/listen` stream.
#[async_trait::async_trait]
pub(super) trait ChangeListener: Sync {
    /// Sends `notifications/<kind>/list_changed`; false when the client is gone.
    async fn list_changed(&self, kind: ListChanged) -> bool;
}

/// A session's peer and a listen stream notify alike, by methods of the same names (of two
/// types with no trait in common).
macro_rules! change_listener {
    ($($listener:ty),*) => {$(
        #[async_trait::async_trait]
        impl ChangeListener for $listener {
            async fn list_changed(&self, kind: ListChanged) -> bool {
                match kind {
                    ListChanged::Tools => self.notify_tool_list_changed().await,
                    ListChanged::Resources => self.notify_resource_list_changed().await,
                    ListChanged::Prompts => self.notify_prompt_list_changed().await,
                }
                .is_ok()
            }
        }
    )*};
}

change_listener!(Peer<RoleServer>, SubscriptionSink);
