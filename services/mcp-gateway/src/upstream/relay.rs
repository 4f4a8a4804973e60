//! What a downstream server sends while a call runs goes to the client that made the call:
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

#![allow(
    deprecated,
    reason = "sampling, roots and logging are deprecated by the 2026-07-28 revision, and still what session-based clients and servers use"
)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rmcp::{
    ErrorData as McpError,
    model::{
        ClientResult, LoggingMessageNotificationParam, NumberOrString, ProgressNotificationParam, ProgressToken,
        ServerRequest,
    },
};

/// The client a call is made for.
#[async_trait]
pub trait Caller: Send + Sync + 'static {
    /// Passes on one progress notification; its token is the downstream one, for the caller
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
    token: String,
    caller: Arc<dyn Caller>,
}

/// The calls in flight, by id.
#[derive(Default)]
pub struct Relay {
    calls: Mutex<HashMap<u64, InFlight>>,
    next: std::sync::atomic::AtomicU64,
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
    /// Relays what `server` sends during one call (progress under `upstream_token`) to
    /// `caller`, until the guard is dropped (the call finished).
    pub fn register(
        self: &Arc<Self>,
        server: &str,
        upstream_token: &ProgressToken,
        caller: Arc<dyn Caller>,
    ) -> CallGuard {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = InFlight { server: server.to_owned(), token: token_key(upstream_token), caller };
        self.lock().insert(id, call);
        CallGuard { relay: self.clone(), id }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, InFlight>> {
        // Entries are inserted and removed whole: a poisoned lock still holds a consistent map.
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) async fn progress(&self, server: &str, params: ProgressNotificationParam) {
        let token = token_key(&params.progress_token);
        let target = self.lock().values().find(|c| c.server == server && c.token == token).map(|c| c.caller.clone());
        if let Some(caller) = target {
            caller.progress(params).await;
        }
    }

    /// The one client with calls in flight on `server`.
    pub(super) fn caller_on(&self, server: &str) -> Result<Arc<dyn Caller>, NoCaller> {
        let calls = self.lock();
        let mut callers: Vec<&Arc<dyn Caller>> = Vec::new();
        for call in calls.values().filter(|c| c.server == server) {
            if !callers.iter().any(|known| known.client_id() == call.caller.client_id()) {
                callers.push(&call.caller);
            }
        }
        match callers.as_slice() {
            [] => Err(NoCaller::Idle),
            [one] => Ok((*one).clone()),
            many => Err(NoCaller::Ambiguous(many.len())),
        }
    }
}

/// Each connection numbers its own progress tokens; the server is compared beside it.
fn token_key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(s) => format!("s{s}"),
        NumberOrString::Number(n) => format!("n{n}"),
    }
}

pub struct CallGuard {
    relay: Arc<Relay>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.relay.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn the_one_client_calling_a_server_is_its_caller_until_the_call_ends() {
        let relay = Arc::new(Relay::default());
        assert_eq!(relay.caller_on("a").err(), Some(NoCaller::Idle));
        let first = relay.register("a", &token(1), Arc::new(Client(7)));
        // The same client's second call, and another client's call on another server, are no
        // ambiguity.
        let second = relay.register("a", &token(2), Arc::new(Client(7)));
        let _elsewhere = relay.register("b", &token(1), Arc::new(Client(8)));
        assert_eq!(relay.caller_on("a").map(|c| c.client_id()).ok(), Some(7));
        drop((first, second));
        assert_eq!(relay.caller_on("a").err(), Some(NoCaller::Idle), "gone with the calls");
        assert_eq!(relay.caller_on("b").map(|c| c.client_id()).ok(), Some(8));
    }

    #[test]
    fn two_clients_calling_one_server_are_never_guessed_between() {
        let relay = Arc::new(Relay::default());
        let _a = relay.register("s", &token(1), Arc::new(Client(1)));
        let _b = relay.register("s", &token(2), Arc::new(Client(2)));
        assert_eq!(relay.caller_on("s").err(), Some(NoCaller::Ambiguous(2)));
    }
}
