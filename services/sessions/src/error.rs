//! The sessions service's errors, each with its caller-facing code.

use switchyard_kit::{ErrorCode, ServiceError};

use crate::domain::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// A request field is invalid; the message starts with the field's path.
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    #[error("session `{0}` not found")]
    SessionNotFound(String),
    #[error("session `{0}` already exists")]
    SessionExists(String),
    #[error("session `{0}` is closed")]
    SessionClosed(String),
    #[error("role `{0}` not found")]
    RoleNotFound(String),
    #[error("role `{0}` already exists")]
    RoleExists(String),
    /// The generalist new sessions start with: deleting it would break every session created
    /// without an initial role.
    #[error("role `{0}` is the default role of new sessions and cannot be deleted")]
    RoleProtected(String),
    /// A dependency (Redis, Postgres, the triggers service) could not serve the request.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl SessionsError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidArgument { field: field.into(), reason: reason.into() }
    }

    pub fn unavailable(what: &str, err: impl std::fmt::Display) -> Self {
        Self::Unavailable(format!("{what}: {err}"))
    }
}

impl From<FieldError> for SessionsError {
    fn from(FieldError { field, reason }: FieldError) -> Self {
        Self::InvalidArgument { field, reason }
    }
}

impl ServiceError for SessionsError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Self::SessionNotFound(_) | Self::RoleNotFound(_) => ErrorCode::NotFound,
            Self::SessionExists(_) | Self::RoleExists(_) => ErrorCode::AlreadyExists,
            Self::SessionClosed(_) | Self::RoleProtected(_) => ErrorCode::FailedPrecondition,
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            _ => None,
        }
    }
}
