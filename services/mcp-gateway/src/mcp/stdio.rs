//! MCP on stdin/stdout, for desktop clients that launch the gateway: one process, one session.

use std::{future::Future, sync::Arc};

use anyhow::Context;
use rmcp::ServiceExt;

use super::McpHandler;
use crate::gateway::Gateway;

/// Serves one client on stdin/stdout until it disconnects or `shutdown`.
pub async fn serve(gateway: Arc<Gateway>, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
    let running = McpHandler::stdio(gateway).serve(rmcp::transport::stdio()).await.context("starting MCP on stdio")?;
    let cancel = running.cancellation_token();
    tokio::select! {
        reason = running.waiting() => { tracing::info!(?reason, "stdio client disconnected"); }
        () = shutdown => cancel.cancel(),
    }
    Ok(())
}
