//! The status a caller sees when an upstream's connection breaks. When a replica is killed, its
//! connection reset or closed mid-call (a stream cut half-way), tonic's client makes a status
//! out of the transport error: UNKNOWN, INTERNAL or CANCELLED with the hyper, h2 or I/O error as
//! its source, or RESOURCE_EXHAUSTED when the upstream's HTTP/2 server closed the connection
//! with ENHANCE_YOUR_CALM (its guard against clients that reset many streams: a caller whose
//! own callers go away cancels its calls in flight, each a reset). None of those was the
//! upstream's answer, and all of them say "do not retry"; the call simply did not finish on
//! that connection, which is UNAVAILABLE (retryable: the next call connects again, to a
//! replica that is there). A status the upstream sent is decoded from
//! its trailers and has no source, so it is never remapped: an INTERNAL from its handler stays
//! INTERNAL. A client deadline (tonic's `TimeoutExpired`) is the caller's own limit, not a
//! broken connection, and is left as it is too.

use std::error::Error;

use tonic::{Code, Status};

/// Whether `status` was made by this process's client from a broken connection (a transport
/// error in its source chain), as opposed to sent by the upstream or caused by a deadline.
pub fn broken_connection(status: &Status) -> bool {
    if !matches!(status.code(), Code::Unknown | Code::Internal | Code::Cancelled | Code::ResourceExhausted) {
        return false;
    }
    let mut transport = false;
    let mut source: Option<&(dyn Error + 'static)> = status.source();
    while let Some(err) = source {
        if err.is::<tonic::TimeoutExpired>() {
            return false;
        }
        transport |= err.is::<tonic::transport::Error>()
            || err.is::<hyper::Error>()
            || err.is::<h2::Error>()
            || err.is::<std::io::Error>();
        source = err.source();
    }
    transport
}

/// The code to pass on for `status`, an upstream call's outcome: UNAVAILABLE for a broken
/// connection ([`broken_connection`]), the upstream's own code otherwise.
pub fn upstream_code(status: &Status) -> Code {
    if broken_connection(status) { Code::Unavailable } else { status.code() }
}

/// `status` as this service passes it on to its caller after calling `upstream` (e.g.
/// `"sessions"`): a broken connection becomes UNAVAILABLE naming the upstream; any other status
/// is returned unchanged.
pub fn from_upstream(upstream: &str, status: Status) -> Status {
    if broken_connection(&status) { Status::unavailable(broken_message(upstream, &status)) } else { status }
}

/// The message for a broken connection to `upstream`: what broke, for the logs and the caller.
pub fn broken_message(upstream: &str, status: &Status) -> String {
    format!("the connection to the {upstream} service broke during the call; retry: {}", status.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_status(code: Code) -> Status {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        Status::from_error(Box::new(Wrapped { code, source: reset }))
    }

    /// A transport error wrapping an I/O error, as hyper's client errors wrap the socket's.
    #[derive(Debug)]
    struct Wrapped {
        code: Code,
        source: std::io::Error,
    }

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "transport error ({:?})", self.code)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_connection_closed_by_the_upstreams_reset_guard_is_unavailable_and_its_own_refusal_is_kept() {
        // What tonic's client makes of a GOAWAY with ENHANCE_YOUR_CALM.
        let goaway = Status::from_error(Box::new(h2::Error::from(h2::Reason::ENHANCE_YOUR_CALM)));
        assert_eq!(goaway.code(), Code::ResourceExhausted, "tonic's own mapping of ENHANCE_YOUR_CALM");
        let passed_on = from_upstream("sessions", goaway);
        assert_eq!(passed_on.code(), Code::Unavailable);
        assert!(passed_on.message().contains("sessions service"), "{}", passed_on.message());
        // The upstream's own RESOURCE_EXHAUSTED (its admission limit, a budget) came in its
        // trailers, with no transport error behind it: passed on as it is.
        let refused = Status::resource_exhausted("server overloaded: 1024 requests already in flight");
        assert_eq!(from_upstream("sessions", refused).code(), Code::ResourceExhausted);
    }

    #[test]
    fn transport_failures_become_unavailable_naming_the_upstream() {
        let status = io_status(Code::Unknown);
        assert_eq!(status.code(), Code::Unknown, "tonic's own mapping of an unknown error");
        let passed = from_upstream("sessions", status);
        assert_eq!(passed.code(), Code::Unavailable);
        assert!(passed.message().contains("sessions service"), "{}", passed.message());

        // An h2 reset with a reason tonic maps to INTERNAL or CANCELLED.
        for reason in [h2::Reason::INTERNAL_ERROR, h2::Reason::CANCEL, h2::Reason::NO_ERROR] {
            let status = Status::from_error(Box::new(h2::Error::from(reason)));
            assert!(matches!(status.code(), Code::Internal | Code::Cancelled), "{reason:?}: {status:?}");
            assert_eq!(upstream_code(&status), Code::Unavailable, "{reason:?}");
        }
    }

    #[test]
    fn statuses_the_upstream_sent_and_deadlines_are_passed_on_unchanged() {
        // Decoded from trailers: no source.
        for code in [Code::Internal, Code::Unknown, Code::Cancelled, Code::NotFound, Code::Unavailable] {
            let sent = Status::new(code, "from the handler");
            assert!(!broken_connection(&sent));
            let passed = from_upstream("router", sent);
            assert_eq!((passed.code(), passed.message()), (code, "from the handler"));
        }
        // Statuses tonic made for other reasons keep their code.
        let unknown = Status::from_error("not a transport error".into());
        assert_eq!(upstream_code(&unknown), Code::Unknown);
    }
}
