//! What an upstream server sends while a call runs goes to the client that made the call:
//! progress, log messages, and its requests to the client — sampling (`sampling/createMessage`),
//! elicitation (`elicitation/create`) and roots (`roots/list`). The client is a [`Caller`] its
//! front supplies, so no front's protocol reaches the gateway core.
//!
//! Progress names its call (the token the gateway sent), so it always finds its caller. Log
//! messages and server-to-client requests name no call — over stdio there is not even a
//! related-request id — so they go to the caller of *the one call in flight* on that server.
//! While calls of two different callers are in flight on the same server, nobody can tell whose
//! a request is: it is refused (the server gets an error and carries on without the answer) and
//! a log message is dropped. Never guessing is the point: a wrong guess would show one client
//! another's data, possibly across tenants.
//!
//! Notifications are routed the moment they are read off the connection ([`Tapped`]), not when
//! their handler runs: the connection hands each notification to a task of its own but the
//! call's result straight to the waiting call, so a log message sent just before the result
//! could otherwise be routed after the call had ended, and be lost. A call then waits (briefly)
//! until what was routed to it has reached its client before it returns its result, so the
//! client sees the server's messages before the result, in the order the server sent them.

#![allow(
    deprecated,
    reason = "sampling, roots and logging are deprecated by the 2026-07-28 revision, and still what session-based clients and servers use"
)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use rmcp::{
    ErrorData as McpError,
    model::{
        ClientResult, GetExtensions, GetMeta, JsonRpcMessage, LoggingMessageNotificationParam, NumberOrString,
        ProgressNotificationParam, ProgressToken, ServerNotification, ServerRequest,
    },
    service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use tokio::sync::Notify;

/// The client a call is made for.
#[async_trait]
pub trait Caller: Send + Sync + 'static {
    /// Passes on one progress notification; its token is the upstream one, for the caller
    /// to replace with its own.
    async fn progress(&self, params: ProgressNotificationParam);
    /// Passes on one log message.
    async fn log(&self, params: LoggingMessageNotificationParam);
    /// Asks the client what the server asked (sampling, elicitation, roots), within the
    /// caller's own time limit.
    async fn request(&self, request: ServerRequest) -> Result<ClientResult, McpError>;
    /// The client connection: equal for every call one client makes, so its concurrent calls
    /// are not taken for two clients'.
    fn client_id(&self) -> u64;
}

struct InFlight {
    server: String,
    /// The upstream progress token, known once the request is sent.
    token: Option<String>,
    caller: Arc<dyn Caller>,
    pending: Arc<Pending>,
}

/// How many notifications routed to one call have not reached its client yet.
#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    settled: Notify,
}

impl Pending {
    fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.settled.notify_waiters();
        }
    }
}

/// A notification routed to its caller, carried in the notification's extensions from the
/// connection to its handler. The calls it belongs to count it as pending until the handler
/// has passed it on and let go of it.
#[derive(Clone)]
pub struct Delivery(Arc<Routed>);

struct Routed {
    caller: Arc<dyn Caller>,
    calls: Vec<Arc<Pending>>,
}

impl Delivery {
    fn new(caller: Arc<dyn Caller>, calls: Vec<Arc<Pending>>) -> Self {
        calls.iter().for_each(|call| call.add());
        Self(Arc::new(Routed { caller, calls }))
    }

    pub fn caller(&self) -> &Arc<dyn Caller> {
        &self.0.caller
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        self.calls.iter().for_each(|call| call.done());
    }
}

/// The calls in flight, by id.
#[derive(Default)]
pub struct Relay {
    calls: Mutex<HashMap<u64, InFlight>>,
    next: AtomicU64,
}

/// Why a server-to-client message found no caller.
#[derive(Debug, PartialEq, Eq)]
pub enum NoCaller {
    /// No call of the gateway's is in flight on the server.
    Idle,
    /// Calls of several clients are in flight on the server.
    Ambiguous(usize),
}

impl std::fmt::Display for NoCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Idle => f.write_str("no call is in flight on this server, so there is no client to ask"),
            Self::Ambiguous(n) => write!(
                f,
                "calls of {n} clients are in flight on this server, so the gateway cannot tell which client to ask"
            ),
        }
    }
}

impl Relay {
    /// Relays what `server` sends during one call to `caller`, until the guard is dropped (the
    /// call finished). Register before sending the request, so nothing the server sends at once
    /// finds the call missing, and put the guard's [`RelayedCall`] in the request's extensions:
    /// the connection then learns the progress token it numbered as it writes the request out,
    /// before the server can answer with progress.
    pub fn register(self: &Arc<Self>, server: &str, caller: Arc<dyn Caller>) -> CallGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let pending = Arc::new(Pending::default());
        let call = InFlight { server: server.to_owned(), token: None, caller, pending: pending.clone() };
        self.lock().insert(id, call);
        CallGuard { relay: self.clone(), id, pending }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, InFlight>> {
        // Entries are inserted and removed whole: a poisoned lock still holds a consistent map.
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Learns the progress token of a marked call's request the connection is about to send.
    fn learn_token(&self, message: &TxJsonRpcMessage<RoleClient>) {
        let JsonRpcMessage::Request(request) = message else { return };
        let Some(RelayedCall(id)) = request.request.extensions().get::<RelayedCall>().copied() else { return };
        if let (Some(token), Some(call)) = (request.request.get_meta().get_progress_token(), self.lock().get_mut(&id)) {
            call.token = Some(token_key(&token));
        }
    }

    /// Routes a notification `server` just sent: progress to the call its token names, a log
    /// message to the one client calling the server. What finds no caller is dropped here.
    pub(super) fn route(&self, server: &str, notification: &mut ServerNotification) {
        match notification {
            ServerNotification::ProgressNotification(progress) => {
                let token = token_key(&progress.params.progress_token);
                let calls = self.lock();
                let call = calls.values().find(|c| c.server == server && c.token.as_ref() == Some(&token));
                if let Some(call) = call {
                    progress.extensions.insert(Delivery::new(call.caller.clone(), vec![call.pending.clone()]));
                }
            }
            ServerNotification::LoggingMessageNotification(log) => match self.client_on(server) {
                Ok(client) => {
                    log.extensions.insert(Delivery::new(client.caller, client.calls));
                }
                // Not the gateway's own log: kept at debug so a chatty server cannot flood it.
                Err(why) => tracing::debug!(server, %why, "a server's log message was not relayed"),
            },
            _ => {}
        }
    }

    /// The one client with calls in flight on `server`.
    pub(super) fn caller_on(&self, server: &str) -> Result<Arc<dyn Caller>, NoCaller> {
        self.client_on(server).map(|client| client.caller)
    }

    /// The one client with calls in flight on `server`, and those calls.
    fn client_on(&self, server: &str) -> Result<ClientCalls, NoCaller> {
        let calls = self.lock();
        let mut on_server = calls.values().filter(|c| c.server == server).peekable();
        let Some(first) = on_server.peek().map(|c| c.caller.clone()) else { return Err(NoCaller::Idle) };
        let mut clients = vec![first.client_id()];
        let mut pending = Vec::new();
        for call in on_server {
            let client = call.caller.client_id();
            if !clients.contains(&client) {
                clients.push(client);
            }
            pending.push(call.pending.clone());
        }
        match clients.len() {
            1 => Ok(ClientCalls { caller: first, calls: pending }),
            many => Err(NoCaller::Ambiguous(many)),
        }
    }
}

/// One client's calls in flight on a server.
struct ClientCalls {
    caller: Arc<dyn Caller>,
    calls: Vec<Arc<Pending>>,
}

/// Each connection numbers its own progress tokens; the server is compared beside it.
fn token_key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(s) => format!("s{s}"),
        NumberOrString::Number(n) => format!("n{n}"),
    }
}

/// Marks a call's request (in its extensions, never sent) as the one a [`CallGuard`] relays
/// for, so the connection can note the request's progress token as it sends it.
#[derive(Debug, Clone, Copy)]
pub struct RelayedCall(u64);

/// One call in flight; dropping it ends the relaying.
pub struct CallGuard {
    relay: Arc<Relay>,
    id: u64,
    pending: Arc<Pending>,
}

impl CallGuard {
    /// The mark for this call's request.
    pub fn mark(&self) -> RelayedCall {
        RelayedCall(self.id)
    }

    /// Waits until everything routed to this call has reached its client, at most `limit` (a
    /// client that stopped reading must not hold the result back). False if time ran out.
    pub async fn delivered(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let settled = self.pending.settled.notified();
            tokio::pin!(settled);
            // Registered before the count is read, so a delivery finishing in between wakes us.
            settled.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return false;
            }
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.relay.lock().remove(&self.id);
    }
}

/// An upstream connection whose notifications are routed as they are read, in order, before
/// anything read after them (the call's result above all) is handed on.
pub(super) struct Tapped<T> {
    inner: T,
    server: String,
    relay: Arc<Relay>,
}

impl<T> Tapped<T> {
    pub(super) fn new(inner: T, server: &str, relay: Arc<Relay>) -> Self {
        Self { inner, server: server.to_owned(), relay }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Before the bytes leave: progress the server sends at once must find its call.
        self.relay.learn_token(&item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(notification) = &mut message {
            self.relay.route(&self.server, &mut notification.notification);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientRequest, LoggingLevel, LoggingMessageNotification,
        ProgressNotification, RequestId,
    };

    use super::*;

    struct Client(u64);

    #[async_trait]
    impl Caller for Client {
        async fn progress(&self, _params: ProgressNotificationParam) {}
        async fn log(&self, _params: LoggingMessageNotificationParam) {}
        async fn request(&self, _request: ServerRequest) -> Result<ClientResult, McpError> {
            Err(McpError::internal_error("not asked in these tests", None))
        }
        fn client_id(&self) -> u64 {
            self.0
        }
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    /// A call's request as the connection sends it: the token rmcp numbered, and the mark
    /// when the call is relayed.
    fn request(progress: i64, mark: Option<RelayedCall>) -> TxJsonRpcMessage<RoleClient> {
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("echo")));
        request.get_meta_mut().set_progress_token(token(progress));
        if let Some(mark) = mark {
            request.extensions_mut().insert(mark);
        }
        JsonRpcMessage::request(request, RequestId::Number(progress))
    }

    /// A relayed call whose request was sent with `progress` as its token.
    fn call(relay: &Arc<Relay>, server: &str, progress: i64, client: u64) -> CallGuard {
        let guard = relay.register(server, Arc::new(Client(client)));
        relay.learn_token(&request(progress, Some(guard.mark())));
        guard
    }

    fn log_message() -> ServerNotification {
        ServerNotification::LoggingMessageNotification(LoggingMessageNotification::new(
            LoggingMessageNotificationParam::new(LoggingLevel::Info, serde_json::json!("working")),
        ))
    }

    fn delivery(notification: &ServerNotification) -> Option<Delivery> {
        match notification {
            ServerNotification::LoggingMessageNotification(n) => n.extensions.get::<Delivery>().cloned(),
            ServerNotification::ProgressNotification(n) => n.extensions.get::<Delivery>().cloned(),
            _ => None,
        }
    }

    #[test]
    fn the_one_client_calling_a_server_is_its_caller_until_the_call_ends() {
        let relay = Arc::new(Relay::default());
        assert_eq!(relay.caller_on("a").err(), Some(NoCaller::Idle));
        let first = call(&relay, "a", 1, 7);
        // The same client's second call, and another client's call on another server, are no
        // ambiguity.
        let second = call(&relay, "a", 2, 7);
        let _elsewhere = call(&relay, "b", 1, 8);
        assert_eq!(relay.caller_on("a").map(|c| c.client_id()).ok(), Some(7));
        drop((first, second));
        assert_eq!(relay.caller_on("a").err(), Some(NoCaller::Idle), "gone with the calls");
        assert_eq!(relay.caller_on("b").map(|c| c.client_id()).ok(), Some(8));
    }

    #[test]
    fn two_clients_calling_one_server_are_never_guessed_between() {
        let relay = Arc::new(Relay::default());
        let _a = call(&relay, "s", 1, 1);
        let _b = call(&relay, "s", 2, 2);
        assert_eq!(relay.caller_on("s").err(), Some(NoCaller::Ambiguous(2)));
        let mut log = log_message();
        relay.route("s", &mut log);
        assert!(delivery(&log).is_none(), "a log message of one of two clients is dropped, not guessed");
    }

    #[test]
    fn progress_goes_to_the_call_its_token_names() {
        let relay = Arc::new(Relay::default());
        let _a = call(&relay, "s", 1, 1);
        let _b = call(&relay, "s", 2, 2);
        let mut progress = ServerNotification::ProgressNotification(ProgressNotification::new(
            ProgressNotificationParam::new(token(2), 50.0),
        ));
        relay.route("s", &mut progress);
        assert_eq!(delivery(&progress).map(|d| d.caller().client_id()), Some(2));
        let mut elsewhere = ServerNotification::ProgressNotification(ProgressNotification::new(
            ProgressNotificationParam::new(token(2), 50.0),
        ));
        relay.route("other", &mut elsewhere);
        assert!(delivery(&elsewhere).is_none(), "the same token on another server is another call");
    }

    /// The token is known from the moment the request is written out, so progress the server
    /// sends before the call's sender has even seen its own token still finds the call.
    #[test]
    fn a_marked_request_teaches_its_progress_token_as_it_is_sent() {
        let relay = Arc::new(Relay::default());
        let guard = relay.register("s", Arc::new(Client(3)));
        let _other = call(&relay, "s", 9, 4);
        let progress = || {
            ServerNotification::ProgressNotification(ProgressNotification::new(ProgressNotificationParam::new(
                token(5),
                1.0,
            )))
        };
        relay.learn_token(&request(5, None));
        let mut early = progress();
        relay.route("s", &mut early);
        assert!(delivery(&early).is_none(), "an unmarked request teaches nothing");

        relay.learn_token(&request(5, Some(guard.mark())));
        let mut early = progress();
        relay.route("s", &mut early);
        assert_eq!(delivery(&early).map(|d| d.caller().client_id()), Some(3));
    }

    #[tokio::test]
    async fn a_call_waits_for_what_was_routed_to_it_before_it_ends() {
        let relay = Arc::new(Relay::default());
        let guard = call(&relay, "s", 1, 7);
        assert!(guard.delivered(Duration::from_millis(1)).await, "nothing routed, nothing to wait for");

        // Routed while the call is in flight; its handler runs later, on a task of its own.
        let mut log = log_message();
        relay.route("s", &mut log);
        let routed = delivery(&log).expect("routed to the one caller");
        assert_eq!(routed.caller().client_id(), 7);
        drop(log);
        assert!(!guard.delivered(Duration::from_millis(20)).await, "the handler has not passed it on yet");

        let handler = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(routed);
        });
        assert!(guard.delivered(Duration::from_secs(5)).await, "the call ends once the handler let go");
        handler.await.expect("handler");
    }
}
