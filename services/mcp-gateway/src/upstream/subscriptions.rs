//! Resource subscriptions (`resources/subscribe`, `resources/unsubscribe`): which client
//! sessions want to hear when an upstream server's resource changes, so the server's
//! `notifications/resources/updated` reaches them — and only them.
//!
//! The gateway holds one upstream subscription per (server, URI), however many clients want
//! it ([`Downstream`]): the first subscriber makes it, those who come while it is being made
//! wait for the outcome, and the last one to leave (unsubscribing, its session ending, or its
//! connection found closed when an update is passed on) ends it. When a server reconnects its
//! subscriptions are gone with the old connection, so the supervisor makes them again for every
//! URI that still has subscribers ([`Subscriptions::renew`]).
//!
//! Subscriptions live in the process that took the subscribe request: upstream connections
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

/// One (server, URI)'s subscription on the upstream connection, shared by its subscribers.
#[derive(Default)]
pub struct Downstream(tokio::sync::OnceCell<()>);

impl Downstream {
    /// Makes the upstream subscription with `subscribe` unless it is made already. Whoever
    /// comes while it is being made waits for that attempt: on success they share it, on
    /// failure the next of them tries again. So no subscriber is told it is subscribed while
    /// nothing is held upstream, and each one refused hears the server's own refusal.
    pub async fn ensure<E>(&self, subscribe: impl Future<Output = Result<(), E>>) -> Result<(), E> {
        self.0.get_or_try_init(|| subscribe).await.map(|&()| ())
    }
}

/// The sessions subscribed to one (server, URI), by session key, and its upstream subscription.
#[derive(Default)]
struct Entry {
    sessions: HashMap<String, Arc<dyn Subscriber>>,
    downstream: Arc<Downstream>,
}

type Table = BTreeMap<(String, String), Entry>;

/// Every session's resource subscriptions, by the server that owns the resource.
#[derive(Default)]
pub struct Subscriptions {
    table: Mutex<Table>,
}

impl Subscriptions {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes `session` to `uri` on `server` (again is a no-op). The caller then makes sure
    /// of the URI's upstream subscription through the returned [`Downstream`], and takes the
    /// session off again ([`Subscriptions::remove`]) if that fails.
    pub fn add(&self, server: &str, uri: &str, session: &str, subscriber: Arc<dyn Subscriber>) -> Arc<Downstream> {
        let mut table = self.table();
        let entry = table.entry((server.to_owned(), uri.to_owned())).or_default();
        entry.sessions.insert(session.to_owned(), subscriber);
        entry.downstream.clone()
    }

    /// Takes `session` off `uri` on `server`; true when that was the URI's last subscriber,
    /// so the caller unsubscribes upstream. Not subscribed: false, nothing changes.
    pub fn remove(&self, server: &str, uri: &str, session: &str) -> bool {
        let mut table = self.table();
        let key = (server.to_owned(), uri.to_owned());
        let Some(entry) = table.get_mut(&key) else { return false };
        if entry.sessions.remove(session).is_none() {
            return false;
        }
        let last = entry.sessions.is_empty();
        if last {
            table.remove(&key);
        }
        last
    }

    /// Takes `session` off `uri` on whichever server it was subscribed (even one that no
    /// longer lists the resource); the (server, URI) pairs left without subscribers, to
    /// unsubscribe upstream.
    pub fn leave(&self, uri: &str, session: &str) -> Vec<(String, String)> {
        self.drop_session(session, |(_, subscribed)| subscribed == uri)
    }

    /// Drops every subscription of `session` (its session ended); the (server, URI) pairs
    /// left without subscribers, to unsubscribe upstream.
    pub fn end_session(&self, session: &str) -> Vec<(String, String)> {
        self.drop_session(session, |_| true)
    }

    /// Takes `session` off the (server, URI) pairs `which` picks; those left without
    /// subscribers.
    fn drop_session(&self, session: &str, which: impl Fn(&(String, String)) -> bool) -> Vec<(String, String)> {
        let mut emptied = Vec::new();
        self.table().retain(|key, entry| {
            if which(key) && entry.sessions.remove(session).is_some() && entry.sessions.is_empty() {
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
            .map(|entry| entry.sessions.iter().map(|(session, s)| (session.clone(), s.clone())).collect())
            .unwrap_or_default()
    }

    /// Forgets the upstream subscriptions of `server` that still have subscribers — every
    /// URI, or only `uri` — because they are gone (the server reconnected) or may have been
    /// undone (an unsubscribe crossed a new subscriber's subscribe). Each comes back not yet
    /// made, with its URI, for the caller to make again.
    pub fn renew(&self, server: &str, uri: Option<&str>) -> Vec<(String, Arc<Downstream>)> {
        self.table()
            .iter_mut()
            .filter(|((owner, held), _)| owner == server && uri.is_none_or(|uri| uri == held))
            .map(|((_, held), entry)| {
                entry.downstream = Arc::default();
                (held.clone(), entry.downstream.clone())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Quiet;

    /// The URIs of `server` that have subscribers.
    fn uris(subscriptions: &Subscriptions, server: &str) -> Vec<String> {
        subscriptions.table().keys().filter(|(owner, _)| owner == server).map(|(_, uri)| uri.clone()).collect()
    }

    #[async_trait]
    impl Subscriber for Quiet {
        async fn resource_updated(&self, _params: ResourceUpdatedNotificationParam) -> bool {
            true
        }
    }

    #[test]
    fn one_downstream_subscription_per_uri_however_many_sessions() {
        let subscriptions = Subscriptions::default();
        let first = subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet));
        let second = subscriptions.add("files", "file:///a", "s2", Arc::new(Quiet));
        assert!(Arc::ptr_eq(&first, &second), "both sessions share the URI's downstream subscription");
        let again = subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet));
        assert!(Arc::ptr_eq(&first, &again), "subscribing again is a no-op");
        let other = subscriptions.add("other", "file:///a", "s1", Arc::new(Quiet));
        assert!(!Arc::ptr_eq(&first, &other), "another server's URI is its own");
        assert_eq!(subscriptions.subscribers("files", "file:///a").len(), 2);

        assert!(!subscriptions.remove("files", "file:///a", "s1"), "s2 still wants it");
        assert!(!subscriptions.remove("files", "file:///a", "s1"), "not subscribed any more: nothing to do");
        assert!(subscriptions.remove("files", "file:///a", "s2"), "the last one leaves: unsubscribe downstream");
        assert!(subscriptions.subscribers("files", "file:///a").is_empty());
        assert_eq!(uris(&subscriptions, "other"), vec!["file:///a".to_owned()]);
        assert!(uris(&subscriptions, "files").is_empty());
    }

    /// Subscribing upstream counts once for every subscriber: a second session that comes
    /// while the first one's attempt is under way waits for it, and when that attempt is
    /// refused it tries again itself instead of being told it holds a subscription nobody made.
    #[tokio::test]
    async fn a_refused_first_attempt_leaves_the_next_subscriber_to_try_again() {
        let subscriptions = Subscriptions::default();
        let first = subscriptions.add("files", "file:///a", "s1", Arc::new(Quiet));
        let second = subscriptions.add("files", "file:///a", "s2", Arc::new(Quiet));
        let attempts = AtomicUsize::new(0);
        let attempt = |refuse: bool| {
            let attempts = &attempts;
            async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                if refuse { Err("refused") } else { Ok(()) }
            }
        };
        let (refused, made) = tokio::join!(first.ensure(attempt(true)), second.ensure(attempt(false)));
        assert_eq!(refused, Err("refused"));
        assert_eq!(made, Ok(()));
        assert_eq!(attempts.load(Ordering::SeqCst), 2, "the second session made its own attempt");
        let third = subscriptions.add("files", "file:///a", "s3", Arc::new(Quiet));
        assert_eq!(third.ensure(attempt(true)).await, Ok(()), "made already: nothing is sent again");
        assert_eq!(attempts.load(Ordering::SeqCst), 2);

        // Once renewed (the server reconnected), it has to be made again.
        let renewed = subscriptions.renew("files", Some("file:///a"));
        assert_eq!(renewed.len(), 1);
        assert_eq!(renewed[0].1.ensure(attempt(false)).await, Ok(()));
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        assert!(subscriptions.renew("files", Some("file:///b")).is_empty(), "no subscriber, nothing to renew");
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
        assert_eq!(uris(&subscriptions, "files"), vec!["file:///b".to_owned()]);
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
        assert_eq!(uris(&subscriptions, "files"), vec!["file:///b".to_owned()], "the other URI stays");
        assert!(subscriptions.leave("file:///a", "s1").is_empty(), "not subscribed any more: nothing to do");
    }
}
