//! Request rate, errors and latency per gRPC method, for every service the kit's server runs:
//! `rpc.server.requests` (a counter) and `rpc.server.call.duration` (seconds), both labelled
//! with the gRPC `service`, `method` and status `code` (`OK`, `UNAVAILABLE`…).
//!
//! The status comes from [`crate::call_outcome`], the server layer that sees each call end.
//! Methods no service knows (answered UNIMPLEMENTED) are labelled `unknown`, so a caller cannot
//! mint label values.

use std::time::Instant;

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram},
};
use tonic::Code;

use crate::error::code_name;

/// Latency buckets in seconds, from a cache hit (sub-millisecond) to a long model answer.
const DURATION_BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The instruments, made once per server.
#[derive(Clone, Debug)]
pub(crate) struct Instruments {
    requests: Counter<u64>,
    duration: Histogram<f64>,
}

impl Instruments {
    pub(crate) fn new() -> Self {
        let meter = opentelemetry::global::meter("switchyard-kit");
        Self {
            requests: meter
                .u64_counter("rpc.server.requests")
                .with_description("gRPC calls answered, by service, method and status code")
                .build(),
            duration: meter
                .f64_histogram("rpc.server.call.duration")
                .with_unit("s")
                .with_description("gRPC call duration to its final status, by service, method and status code")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
        }
    }
}

impl Instruments {
    /// Records one call that began at `started` and ended with `code`.
    pub(crate) fn record(&self, path: &str, started: Instant, code: Code) {
        let (service, method) = match code {
            Code::Unimplemented => ("unknown", "unknown"),
            _ => split_path(path),
        };
        let labels = [
            KeyValue::new("service", service.to_owned()),
            KeyValue::new("method", method.to_owned()),
            KeyValue::new("code", code_name(code)),
        ];
        self.requests.add(1, &labels);
        self.duration.record(started.elapsed().as_secs_f64(), &labels);
    }
}

/// `/pkg.Service/Method` as (`pkg.Service`, `Method`).
fn split_path(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.split_once('/').unwrap_or((path, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_path_splits_into_service_and_method() {
        assert_eq!(
            split_path("/switchyard.router.v1.RouterService/Chat"),
            ("switchyard.router.v1.RouterService", "Chat")
        );
        assert_eq!(split_path("/odd"), ("odd", ""));
    }
}
