//! One small set of error codes shared by every service, mapped to both gRPC and HTTP.
//! Services keep their own `thiserror` enums and say which code each variant is; the
//! conversion to a `tonic::Status` happens only in their gRPC adapters, through [`to_status`].

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The caller-facing class of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request is malformed: a field is empty, too long, out of range or unparsable.
    InvalidArgument,
    /// The named thing does not exist (or belongs to another tenant).
    NotFound,
    /// The thing being created exists already.
    AlreadyExists,
    /// The request is valid but the thing is in the wrong state (e.g. a closed session).
    FailedPrecondition,
    /// A quota or capacity limit was reached.
    ResourceExhausted,
    /// A dependency is down; retrying later may work.
    Unavailable,
    /// The work did not finish in time.
    DeadlineExceeded,
    Unauthenticated,
    PermissionDenied,
    /// A bug or an unexpected failure on our side.
    Internal,
}

impl ErrorCode {
    pub fn grpc(self) -> Code {
        match self {
            Self::InvalidArgument => Code::InvalidArgument,
            Self::NotFound => Code::NotFound,
            Self::AlreadyExists => Code::AlreadyExists,
            Self::FailedPrecondition => Code::FailedPrecondition,
            Self::ResourceExhausted => Code::ResourceExhausted,
            Self::Unavailable => Code::Unavailable,
            Self::DeadlineExceeded => Code::DeadlineExceeded,
            Self::Unauthenticated => Code::Unauthenticated,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::Internal => Code::Internal,
        }
    }

    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidArgument => 400,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::NotFound => 404,
            Self::AlreadyExists | Self::FailedPrecondition => 409,
            Self::ResourceExhausted => 429,
            Self::Internal => 500,
            Self::Unavailable => 503,
            Self::DeadlineExceeded => 504,
        }
    }

    /// The code for a status received from another service, so errors keep their class as
    /// they travel up the call graph.
    pub fn from_grpc(code: Code) -> Self {
        match code {
            Code::InvalidArgument | Code::OutOfRange => Self::InvalidArgument,
            Code::NotFound => Self::NotFound,
            Code::AlreadyExists => Self::AlreadyExists,
            Code::FailedPrecondition | Code::Aborted => Self::FailedPrecondition,
            Code::ResourceExhausted => Self::ResourceExhausted,
            Code::Unavailable | Code::Cancelled => Self::Unavailable,
            Code::DeadlineExceeded => Self::DeadlineExceeded,
            Code::Unauthenticated => Self::Unauthenticated,
            Code::PermissionDenied => Self::PermissionDenied,
            _ => Self::Internal,
        }
    }
}

/// An error a service returns to callers.
pub trait ServiceError: std::error::Error {
    fn code(&self) -> ErrorCode;

    /// The request field at fault, for `INVALID_ARGUMENT` (e.g. `custom_triggers[2].pattern`).
    fn field(&self) -> Option<&str> {
        None
    }

    /// True for an error received from another Switchyard service that decided and logged it
    /// ([`crate::failures::logged_upstream`]): passed on, it is not logged again.
    fn logged_upstream(&self) -> bool {
        false
    }
}

/// Converts a service error to a gRPC status. The message is the error's display text (which
/// names the field); invalid-argument errors also carry a `google.rpc.BadRequest` detail so
/// programmatic clients can find the field. Internal errors are logged here, once, with their
/// source chain (and marked logged, so the server's failure log does not repeat them), and the
/// caller gets only the top-level message. An error passed on from another service keeps its
/// mark.
pub fn to_status<E: ServiceError>(err: &E) -> Status {
    let code = err.code();
    let message = err.to_string();
    let mut status = match (code, err.field()) {
        (ErrorCode::InvalidArgument, Some(field)) => {
            let details = ErrorDetails::with_bad_request_violation(field, message.clone());
            Status::with_error_details(code.grpc(), message, details)
        }
        (ErrorCode::Internal, _) if !err.logged_upstream() => {
            tracing::error!(
                request_id = crate::failures::request_id().unwrap_or_default(),
                error = %error_chain(err),
                "internal error"
            );
            let mut status = Status::new(code.grpc(), message);
            crate::failures::mark_logged(&mut status);
            status
        }
        _ => Status::new(code.grpc(), message),
    };
    if err.logged_upstream() {
        crate::failures::mark_logged(&mut status);
    }
    status
}

/// The field and reason of an `INVALID_ARGUMENT` received from another service: the field from
/// the status's `BadRequest` detail, or — from a server that sends none — read the way the
/// message is written, `field: reason`. `None` when neither names a field.
pub fn field_violation(status: &Status) -> (Option<String>, String) {
    let message = status.message();
    let violation = status.get_details_bad_request().and_then(|bad| bad.field_violations.into_iter().next());
    match violation {
        Some(violation) => {
            let reason = message.strip_prefix(&format!("{}: ", violation.field)).unwrap_or(message);
            (Some(violation.field), reason.to_owned())
        }
        None => match message.split_once(": ") {
            Some((field, reason)) => (Some(field.to_owned()), reason.to_owned()),
            None => (None, message.to_owned()),
        },
    }
}

/// `outer: cause: root cause`, for logs.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The canonical gRPC name of a status code, as in the gRPC specification and other tools.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("query: must not be empty")]
    struct EmptyQuery;

    impl ServiceError for EmptyQuery {
        fn code(&self) -> ErrorCode {
            ErrorCode::InvalidArgument
        }
        fn field(&self) -> Option<&str> {
            Some("query")
        }
    }

    #[test]
    fn invalid_argument_names_the_field_in_message_and_details() {
        let status = to_status(&EmptyQuery);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "query: must not be empty");
        let details = status.get_error_details();
        let bad_request = details.bad_request().expect("bad request detail");
        assert_eq!(bad_request.field_violations[0].field, "query");
    }

    #[test]
    fn codes_map_to_http_and_back_through_grpc() {
        for code in [
            ErrorCode::InvalidArgument,
            ErrorCode::NotFound,
            ErrorCode::AlreadyExists,
            ErrorCode::FailedPrecondition,
            ErrorCode::ResourceExhausted,
            ErrorCode::Unavailable,
            ErrorCode::DeadlineExceeded,
            ErrorCode::Unauthenticated,
            ErrorCode::PermissionDenied,
            ErrorCode::Internal,
        ] {
            assert_eq!(ErrorCode::from_grpc(code.grpc()), code);
            assert!((400..600).contains(&code.http_status()));
        }
        assert_eq!(ErrorCode::NotFound.http_status(), 404);
        assert_eq!(ErrorCode::InvalidArgument.http_status(), 400);
    }
}
