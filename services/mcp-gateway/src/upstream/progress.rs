//! Progress of calls in flight: a downstream server's progress notifications go to whoever
//! made the call. The caller is a [`ProgressSink`] its front supplies, so no front's protocol
//! reaches the gateway core.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};

/// Where one call's progress goes: the client that made the call, under the token it chose.
#[async_trait]
pub trait ProgressSink: Send + Sync + 'static {
    /// Passes on one notification; its token is the downstream one, for the sink to replace.
    async fn relay(&self, params: ProgressNotificationParam);
}

/// The token the gateway sent downstream → the caller's sink. Tokens are rewritten because
/// two clients may pick the same.
#[derive(Default)]
pub struct ProgressRelay {
    calls: Mutex<HashMap<String, Arc<dyn ProgressSink>>>,
}

impl ProgressRelay {
    /// Relays progress sent under `upstream_token` by `server` to `sink`, until the guard is
    /// dropped (the call finished).
    pub fn register(
        self: &Arc<Self>,
        server: &str,
        upstream_token: &ProgressToken,
        sink: Arc<dyn ProgressSink>,
    ) -> ProgressGuard {
        let key = relay_key(server, upstream_token);
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), sink);
        ProgressGuard { relay: self.clone(), key }
    }

    pub(super) async fn forward(&self, server: &str, params: ProgressNotificationParam) {
        let key = relay_key(server, &params.progress_token);
        let target = self.calls.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        if let Some(sink) = target {
            sink.relay(params).await;
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
