//! The triggers service's errors, each with its caller-facing code.

use switchyard_kit::{ErrorCode, FieldError, ServiceError};

#[derive(Debug, thiserror::Error)]
pub enum TriggersError {
    /// A request field is invalid; the message starts with the field's path.
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },

    #[error("role `{0}` is not registered")]
    RoleNotFound(String),

    /// Registering would exceed the registry-wide trigger limit.
    #[error("the registry would hold {would_hold} distinct triggers, over the limit of {limit}")]
    RegistryFull { would_hold: usize, limit: usize },

    #[error("trigger store unavailable: {0}")]
    StoreUnavailable(#[source] crate::store::StoreError),

    #[error("building the matcher: {0}")]
    Matcher(String),
}

impl TriggersError {
    pub fn invalid(field: impl Into<String>, reason: String) -> Self {
        Self::InvalidArgument { field: field.into(), reason }
    }
}

impl TriggersError {
    /// A registration the store failed to write: refused for its content, it is the caller's
    /// to fix (never UNAVAILABLE carrying the database's words); otherwise the store is away.
    pub fn store_write(err: crate::store::StoreError) -> Self {
        if err.is_refused_content() {
            tracing::warn!(%err, "registration refused by the store for its content");
            Self::invalid("role", "holds a value the store cannot keep".into())
        } else {
            Self::StoreUnavailable(err)
        }
    }
}

impl From<FieldError> for TriggersError {
    fn from(err: FieldError) -> Self {
        Self::InvalidArgument { field: err.field, reason: err.reason }
    }
}

impl ServiceError for TriggersError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Self::RoleNotFound(_) => ErrorCode::NotFound,
            Self::RegistryFull { .. } => ErrorCode::ResourceExhausted,
            Self::StoreUnavailable(_) => ErrorCode::Unavailable,
            Self::Matcher(_) => ErrorCode::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            _ => None,
        }
    }
}
