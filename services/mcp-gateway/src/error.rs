//! What can go wrong in the gateway, whatever the front: one error type, mapped to the kit's
//! error codes here, and to MCP errors or gRPC statuses by each front.

use std::time::Duration;

use switchyard_kit::{ErrorCode, ServiceError};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The caller's policies do not let it call the tool.
    #[error("tool `{tool}` may not be called by this caller: {refusal}")]
    Denied { tool: String, refusal: crate::policy::Refusal },
    /// The tool's server cannot take calls right now.
    #[error("{0}")]
    ServerUnavailable(String),
    #[error("tool `{tool}` on server `{server}` did not answer within {after:?}")]
    Timeout { tool: String, server: String, after: Duration },
    /// The downstream server answered the call with a protocol error; passed back as is.
    #[error("{0}")]
    Downstream(rmcp::ErrorData),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

impl GatewayError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidArgument { field: field.into(), reason: reason.into() }
    }
}

impl ServiceError for GatewayError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Self::UnknownTool(_) => ErrorCode::NotFound,
            Self::Denied { .. } => ErrorCode::PermissionDenied,
            Self::ServerUnavailable(_) | Self::Store(_) => ErrorCode::Unavailable,
            Self::Timeout { .. } => ErrorCode::DeadlineExceeded,
            Self::Downstream(err) if err.code == rmcp::model::ErrorCode::INVALID_PARAMS => ErrorCode::InvalidArgument,
            Self::Downstream(err) if err.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND => ErrorCode::NotFound,
            Self::Downstream(_) | Self::Internal(_) => ErrorCode::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            Self::UnknownTool(_) => Some("name"),
            _ => None,
        }
    }
}
