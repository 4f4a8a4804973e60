//! The sessions service's errors, each with its caller-facing code.

use switchyard_kit::{ErrorCode, ServiceError};

use crate::{domain::FieldError, store::StoreError};

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
    /// Built-in roles are shared by every tenant: a tenant changes its own copy instead.
    #[error(
        "role `{0}` is built in and read-only: updating it makes this tenant's own copy, and deleting that copy brings the built-in back"
    )]
    RoleBuiltIn(String),
    /// A dependency (Redis, Postgres, the triggers service) could not serve the request.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
    /// An error the triggers service decided and logged, passed on: not logged again here.
    #[error("{0}")]
    LoggedUpstream(Box<SessionsError>),
}

impl SessionsError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidArgument { field: field.into(), reason: reason.into() }
    }

    /// This error, marked as logged upstream when `logged` (see [`Self::LoggedUpstream`]).
    pub fn passed_on(self, logged: bool) -> Self {
        if logged && !matches!(self, Self::LoggedUpstream(_)) { Self::LoggedUpstream(Box::new(self)) } else { self }
    }

    pub fn unavailable(what: &str, err: impl std::fmt::Display) -> Self {
        Self::Unavailable(format!("{what}: {err}"))
    }

    /// A failed write of the caller's `field`: refused by the store for its content, it is the
    /// caller's to fix (never a 503 carrying the database's words); anything else is the
    /// store being unavailable.
    pub fn store_write(what: &str, field: &str, err: StoreError) -> Self {
        if err.is_refused_content() {
            tracing::warn!(what, field, %err, "write refused by the store for its content");
            Self::invalid(field, "holds a value the store cannot keep")
        } else {
            Self::unavailable(what, err)
        }
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
            Self::SessionClosed(_) | Self::RoleProtected(_) | Self::RoleBuiltIn(_) => ErrorCode::FailedPrecondition,
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Internal(_) => ErrorCode::Internal,
            Self::LoggedUpstream(err) => err.code(),
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            Self::LoggedUpstream(err) => err.field(),
            _ => None,
        }
    }

    fn logged_upstream(&self) -> bool {
        matches!(self, Self::LoggedUpstream(_))
    }
}
