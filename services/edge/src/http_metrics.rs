//! Request rate, errors and latency per HTTP route: `http.server.requests` (a counter) and
//! `http.server.request.duration` (seconds, to the response head: a stream's length is not in
//! it), labelled with the `method`, the `route` template and the `status` code. And `GET
//! /metrics` on the edge's own port, unless `--metrics-listen` moved it to its own address.
//!
//! The route is the template the request matched (`/v1/chat/completions`,
//! `/api/v1/sessions/{session_id}`), never the path itself, so a caller cannot mint label
//! values: a path no route has is `unmatched`, a method outside the standard ones `_OTHER`.

use std::{sync::Arc, time::Instant};

use axum::{
    extract::{MatchedPath, Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{Method, StatusCode};
use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram},
};
use switchyard_kit::metrics_export;

use crate::{Edge, transcode::rules::Lookup};

/// Latency buckets in seconds, from a health check to a long model answer.
const DURATION_BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The instruments, made once per edge.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    requests: Counter<u64>,
    duration: Histogram<f64>,
}

impl HttpMetrics {
    pub fn new() -> Self {
        let meter = opentelemetry::global::meter("switchyard-edge");
        Self {
            requests: meter
                .u64_counter("http.server.requests")
                .with_description("HTTP requests answered, by method, route template and status code")
                .build(),
            duration: meter
                .f64_histogram("http.server.request.duration")
                .with_unit("s")
                .with_description("time to the response head, by method, route template and status code")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
        }
    }

    fn record(&self, method: &'static str, route: String, status: StatusCode, started: Instant) {
        let labels = [
            KeyValue::new("method", method),
            KeyValue::new("route", route),
            KeyValue::new("status", i64::from(status.as_u16())),
        ];
        self.requests.add(1, &labels);
        self.duration.record(started.elapsed().as_secs_f64(), &labels);
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Standard methods by name; anything else is `_OTHER` (a caller could send any token).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "_OTHER",
    }
}

/// The route template a request matched: axum's for the fixed routes, the transcoding table's
/// for the REST API's.
fn route_label(edge: &Edge, request: &Request) -> String {
    if let Some(path) = request.extensions().get::<MatchedPath>() {
        return path.as_str().to_owned();
    }
    match edge.routes.find(request.method(), request.uri().path()) {
        Lookup::Found(route, _) => route.template.to_string(),
        Lookup::MethodNotAllowed(_) | Lookup::NotFound => "unmatched".to_owned(),
    }
}

/// Counts and times every request (see the module).
pub async fn measure(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = route_label(&edge, &request);
    let response = next.run(request).await;
    edge.http_metrics.record(method, route, response.status(), started);
    response
}

/// `GET /metrics`: the process's Prometheus text, when no `--metrics-listen` took it elsewhere.
pub async fn scrape() -> Response {
    match metrics_export::installed() {
        Some(reader) if metrics_export::served_on_main_port() => metrics_export::scrape(reader).await,
        Some(_) => (StatusCode::NOT_FOUND, "metrics are served on --metrics-listen\n").into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not collected in this process\n").into_response(),
    }
}
