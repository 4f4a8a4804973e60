//! The relay between an MCP client and the downstream servers: requests forwarded to a server
//! within `--call-timeout`, and what a server sends during a call (progress, log messages, its
//! own requests) relayed back to the client that made it.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError,
    model::{ClientResult, ProgressNotificationParam, ProgressToken, ServerRequest},
    service::{Peer, RoleServer},
};

use super::McpHandler;
use crate::upstream::Caller;

impl McpHandler {
    /// Waits for a request forwarded to `server` no longer than `--call-timeout`, so a server
    /// that stops answering costs the client an error, not a request that never ends.
    pub(super) async fn forwarded<T>(
        &self,
        server: &str,
        method: &str,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        let timeout = self.gateway.settings().call_timeout;
        match tokio::time::timeout(timeout, request).await {
            Ok(result) => result.map_err(|err| service_error(server, err)),
            Err(_) => Err(McpError::internal_error(
                format!("server `{server}` did not answer {method} within {timeout:?}"),
                None,
            )),
        }
    }
}

/// The MCP client a call is made for: what the downstream server sends during the call goes
/// back to it — progress under the token the client chose, log messages, and the server's
/// requests (sampling, elicitation, roots), each only if the client declared it can answer.
pub(super) struct ClientCaller {
    pub(super) peer: Peer<RoleServer>,
    pub(super) token: Option<ProgressToken>,
    pub(super) client: u64,
    /// How long the client has to answer a request (a person may be answering an elicitation).
    pub(super) timeout: Duration,
}

#[async_trait::async_trait]
impl Caller for ClientCaller {
    async fn progress(&self, mut params: ProgressNotificationParam) {
        // A client that sent no token asked for no progress.
        if let Some(token) = &self.token {
            params.progress_token = token.clone();
            let _ = self.peer.notify_progress(params).await;
        }
    }

    #[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
    async fn log(&self, params: rmcp::model::LoggingMessageNotificationParam) {
        let _ = self.peer.notify_logging_message(params).await;
    }

    async fn request(&self, request: ServerRequest) -> Result<ClientResult, McpError> {
        let capabilities = self.peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        let (what, declared) = match &request {
            ServerRequest::CreateMessageRequest(_) => ("sampling", capabilities.sampling.is_some()),
            ServerRequest::ElicitRequest(_) => ("elicitation", capabilities.elicitation.is_some()),
            ServerRequest::ListRootsRequest(_) => ("roots", capabilities.roots.is_some()),
            _ => ("this request", false),
        };
        if !declared {
            return Err(McpError::invalid_request(format!("the calling client does not support {what}"), None));
        }
        match tokio::time::timeout(self.timeout, self.peer.send_request(request)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(rmcp::ServiceError::McpError(err))) => Err(err),
            Ok(Err(err)) => Err(McpError::internal_error(format!("asking the calling client for {what}: {err}"), None)),
            Err(_) => Err(McpError::internal_error(
                format!("the calling client did not answer {what} within {:?}", self.timeout),
                None,
            )),
        }
    }

    fn client_id(&self) -> u64 {
        self.client
    }
}

fn service_error(server: &str, err: rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(inner) => inner,
        other => McpError::internal_error(format!("server `{server}`: {other}"), None),
    }
}
