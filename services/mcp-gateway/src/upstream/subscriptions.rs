//! Resource subscriptions (`resources/subscribe`, `resources/unsubscribe`): which client
//! sessions want to hear when a downstream server's resource changes, so the server's
//! `notifications/resources/updated` reaches them — and only them.
//!
//! The gateway holds one downstream subscription per (server, URI), however many clients want
//! it: the first subscriber makes it, the last one to leave (unsubscribing, its session ending,
//! or its connection found closed when an update is passed on) ends it. When a server
//! reconnects its subscriptions are gone with the old connection, so the supervisor makes them
//! again for every URI that still has subscribers.
//!
//! Subscriptions live in the process that took the subscribe request: downstream connections
//! are per replica, and so are the clients' notification streams.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rmcp::model::ResourceUpdatedNotificationParam;

/// A client session that subscribed to resources.
#[async_trait]
pub trait Subscriber: Send + Sync + 'static {
    /// Passes on one update; false when the client is gone (its subscriptions are then
    /// dropped).
    async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) -> bool;
}

/// (server, URI) → the sessions subscribed to it, by session key.
type Table = BTreeMap<(String, String), HashMap<String, Arc<dyn Subscriber>>>;

/// Every session's resource subscriptions, by the server that owns the resource.
#[derive(Default)]
pub struct Subscriptions {
    table: Mutex<Table>,
}

impl Subscriptions {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes `session` to `uri` on `server` (again is a no-op); true when it is the URI's
    /// first subscriber, so the caller subscribes downstream.
    pub fn add(&self, server: &str, uri: &str, session: &str, subscriber: Arc<dyn Subscriber>) -> bool {
        let mut table = self.table();
        let sessions = table.entry((server.to_owned(), uri.to_owned())).or_default();
        let first = sessions.is_empty();
        sessions.insert(session.to_owned(), subscriber);
        first
    }

    /// Takes `session` off `uri` on `server`; true when that was the URI's last subscriber,
    /// so the caller unsubscribes downstream. Not subscribed: false, nothing changes.
    pub fn remove(&self, server: &str, uri: &str, session: &str) -> bool {
        let mut table = self.table();
        let key = (server.to_owned(), uri.to_owned());
        let Some(sessions) = table.get_mut(&key) else { return false };
        if sessions.remove(session).is_none() {
            return false;
        }
        let last = sessions.is_empty();
        if last {
            table.remove(&key);
        }
        last
    }

    /// Takes `session` off `uri` on whichever server it was subscribed (even one that no
    /// longer lists the resource); the (server, URI) pairs left without subscribers, to
    /// unsubscribe downstream.
    pub fn leave(&self, uri: &str, session: &str) -> Vec<(String, String)> {
        self.drop_session(session, |(_, subscribed)| subscribed == uri)
    }

    /// Drops every subscription of `session` (its session ended); the (server, URI) pairs
    /// left without subscribers, to unsubscribe downstream.
    pub fn end_session(&self, session: &str) -> Vec<(String, String)> {
        self.drop_session(session, |_| true)
    }

    /// Takes `session` off the (server, URI) pairs `which` picks; those left without
    /// subscribers.
    fn drop_session(&self, session: &str, which: impl Fn(&(String, String)) -> bool) -> Vec<(String, String)> {
        let mut emptied = Vec::new();
        self.table().retain(|key, sessions| {
            if which(key) && sessions.remove(session).is_some() && sessions.is_empty() {
                emptied.push(key.clone());
                return false;
            }
            true
        });
        emptied
    }

    /// Whoever is subscribed to `uri` on `server`, by session.
    pub fn subscribers(&self, server: &str, uri: &str) -> Vec<(String, Arc<dyn Subscriber>)> {
        self.table()
            .get(&(server.to_owned(), uri.to_owned()))
            .map(|sessions| sessions.iter().map(|(session, s)| (session.clone(), s.clone())).collect())
            .unwrap_or_default()
    }

    /// The URIs of `server` that have subscribers (to subscribe again after a reconnect).
    pub fn uris_of(&self, server: &str) -> Vec<String> {
        self.table().keys().filter(|(owner, _)| owner == server).map(|(_, uri)| uri.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quiet;

    #[async_trait]
    impl Subscriber for Quiet {
        async fn resource_updated(&self, _params: ResourceUpdatedNotificationParam) -> bool {
            true
        }
    }

    #[test]
    fn one_downstream_subscription_per_uri_however_many_sessions() {
        let subscriptions = Subscriptions::default();
        assert!(subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet)), "the first subscribes downstream");
        assert!(!subscriptions.add("files", "file:///a", "s2", Arc::new(Quiet)));
        assert!(!subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet)), "again is a no-op");
        assert!(subscriptions.add("other", "file:///a", "s1", Arc::new(Quiet)), "another server's URI is its own");
        assert_eq!(subscriptions.subscribers("files", "file:///a").len(), 2);

        assert!(!subscriptions.remove("files", "file:///a", "s1"), "s2 still wants it");
        assert!(!subscriptions.remove("files", "file:///a", "s1"), "not subscribed any more: nothing to do");
        assert!(subscriptions.remove("files", "file:///a", "s2"), "the last one leaves: unsubscribe downstream");
        assert!(subscriptions.subscribers("files", "file:///a").is_empty());
        assert_eq!(subscriptions.uris_of("other"), vec!["file:///a".to_owned()]);
        assert!(subscriptions.uris_of("files").is_empty());
    }

    #[test]
    fn a_session_that_ends_leaves_every_uri_it_held() {
        let subscriptions = Subscriptions::default();
        subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet));
        subscriptions.add("files", "file:///b", "s1", Arc::new(Quiet));
        subscriptions.add("files", "file:///b", "s2", Arc::new(Quiet));
        let mut emptied = subscriptions.end_session("s1");
        emptied.sort();
        assert_eq!(emptied, vec![("files".to_owned(), "file:///a".to_owned())], "file:///b still has s2");
        assert_eq!(subscriptions.uris_of("files"), vec!["file:///b".to_owned()]);
        assert!(subscriptions.end_session("s1").is_empty());
    }

    #[test]
    fn leaving_a_uri_leaves_it_on_every_server() {
        let subscriptions = Subscriptions::default();
        subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet));
        subscriptions.add("mirror", "file:///a", "s1", Arc::new(Quiet));
        subscriptions.add("mirror", "file:///a", "s2", Arc::new(Quiet));
        subscriptions.add("files", "file:///b", "s1", Arc::new(Quiet));
        assert_eq!(subscriptions.leave("file:///a", "s1"), vec![("files".to_owned(), "file:///a".to_owned())]);
        assert_eq!(subscriptions.subscribers("mirror", "file:///a").len(), 1, "s2 keeps it");
        assert_eq!(subscriptions.uris_of("files"), vec!["file:///b".to_owned()], "the other URI stays");
        assert!(subscriptions.leave("file:///a", "s1").is_empty(), "not subscribed any more: nothing to do");
    }
}
