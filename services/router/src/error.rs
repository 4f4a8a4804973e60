//! The router's errors and their caller-facing codes.

use switchyard_kit::{ErrorCode, FieldError, ServiceError};

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },

    #[error("{0}")]
    NotFound(String),

    /// The request is valid but cannot be served as configured (no provider for its model).
    #[error("{0}")]
    FailedPrecondition(String),

    /// Every model of the chain failed; the message names each provider and its cause.
    #[error("{0}")]
    ModelsUnavailable(String),

    /// The caller may not do this (budgets are the operator's).
    #[error("{0}")]
    PermissionDenied(String),

    /// A budget of the caller is spent; the message names it. `retry_after` is the time to the
    /// end of its period, when the budget starts again.
    #[error("{message}")]
    BudgetSpent { message: String, retry_after: std::time::Duration },

    /// The client went away before the turn finished.
    #[error("the client cancelled the request")]
    Cancelled,

    /// The server's shutdown grace ran out with the turn still running; what it had was
    /// recorded as interrupted.
    #[error("{}", switchyard_kit::server::SHUTTING_DOWN)]
    ShuttingDown,

    /// A dependency (sessions, Postgres) failed; `code` keeps the class it came with.
    #[error("{context}: {message}")]
    Dependency { context: &'static str, code: ErrorCode, message: String },

    /// An error another Switchyard service decided and logged, passed on unchanged otherwise:
    /// the router does not log it a second time.
    #[error("{0}")]
    LoggedUpstream(Box<RouterError>),
}

impl RouterError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), reason: reason.into() }
    }

    /// A status from another service, keeping its class.
    pub fn from_status(context: &'static str, status: &tonic::Status) -> Self {
        Self::Dependency { context, code: ErrorCode::from_grpc(status.code()), message: status.message().to_owned() }
            .passed_on(status)
    }

    /// This error, made from `status`, marked as logged if the service that answered
    /// `status` logged it.
    pub fn passed_on(self, status: &tonic::Status) -> Self {
        match self {
            Self::LoggedUpstream(_) => self,
            _ if switchyard_kit::failures::logged_upstream(status) => Self::LoggedUpstream(Box::new(self)),
            _ => self,
        }
    }

    pub fn unavailable(context: &'static str, message: impl Into<String>) -> Self {
        Self::Dependency { context, code: ErrorCode::Unavailable, message: message.into() }
    }
}

impl From<FieldError> for RouterError {
    fn from(err: FieldError) -> Self {
        Self::Invalid { field: err.field, reason: err.reason }
    }
}

impl ServiceError for RouterError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid { .. } => ErrorCode::InvalidArgument,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::FailedPrecondition(_) => ErrorCode::FailedPrecondition,
            Self::ModelsUnavailable(_) => ErrorCode::Unavailable,
            Self::BudgetSpent { .. } => ErrorCode::ResourceExhausted,
            Self::PermissionDenied(_) => ErrorCode::PermissionDenied,
            Self::Cancelled => ErrorCode::Unavailable,
            Self::ShuttingDown => ErrorCode::Unavailable,
            Self::Dependency { code, .. } => *code,
            Self::LoggedUpstream(err) => err.code(),
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            Self::LoggedUpstream(err) => err.field(),
            _ => None,
        }
    }

    fn logged_upstream(&self) -> bool {
        matches!(self, Self::LoggedUpstream(_))
    }
}
