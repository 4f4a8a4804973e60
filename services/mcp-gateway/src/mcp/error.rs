//! The one place the gateway's own errors become an MCP client's.

use rmcp::ErrorData as McpError;
use serde_json::json;

use crate::error::GatewayError;

/// The JSON-RPC error code of a tool call a policy refused (in the range JSON-RPC leaves to
/// servers).
pub const POLICY_DENIED: i32 = -32003;

/// Gateway errors as MCP errors: the caller's mistakes as invalid params (naming what), a
/// downstream's own error passed back unchanged.
pub fn to_mcp(err: GatewayError) -> McpError {
    // Each logged here, once (a downstream server's error is that server's, passed on as it
    // is).
    match &err {
        GatewayError::Downstream(_) => {}
        GatewayError::InvalidArgument { .. } | GatewayError::UnknownTool(_) | GatewayError::Denied { .. } => {
            tracing::info!(error = %err, "mcp request refused");
        }
        _ => tracing::error!(error = %err, "mcp request failed"),
    }
    match err {
        GatewayError::InvalidArgument { .. } => McpError::invalid_params(err.to_string(), None),
        GatewayError::UnknownTool(ref name) => McpError::invalid_params(err.to_string(), Some(json!({"tool": name}))),
        GatewayError::Denied { ref tool, .. } => McpError::new(
            rmcp::model::ErrorCode(POLICY_DENIED),
            err.to_string(),
            Some(json!({"tool": tool, "reason": "policy"})),
        ),
        GatewayError::Downstream(inner) => inner,
        GatewayError::ServerUnavailable(_) | GatewayError::Timeout { .. } | GatewayError::Store(_) => {
            McpError::internal_error(err.to_string(), None)
        }
        GatewayError::Internal(_) => McpError::internal_error(err.to_string(), None),
    }
}
