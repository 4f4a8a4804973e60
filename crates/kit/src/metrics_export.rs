//! Prometheus scraping of the same instruments the OTLP export reads: a pull reader registered
//! on the process's `SdkMeterProvider` beside the periodic OTLP one, whose `collect()` is
//! rendered here to the Prometheus text exposition format (0.0.4) for `GET /metrics`.
//!
//! Names follow the OpenTelemetry-to-Prometheus rules: dots and other characters Prometheus
//! refuses become underscores, the unit becomes a suffix (`_seconds`, `_milliseconds`,
//! `_bytes`), counters end in `_total`, histograms give `_bucket{le}`, `_sum` and `_count`.
//! Labels carry no secrets and no caller text: the instruments are written to hold bounded,
//! operator-configured values (routes, providers, servers, tool names, gRPC methods).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, OnceLock, Weak},
    time::Duration,
};

use anyhow::Context as _;
use axum::{
    Router,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::{
    error::OTelSdkResult,
    metrics::{
        InstrumentKind, ManualReader, Pipeline, Temporality,
        data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics},
        reader::MetricReader,
    },
};
use tokio_util::sync::CancellationToken;

use crate::http_server::{self, HttpLimits};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The process's pull reader, shared by the meter provider (which feeds it) and the scrape
/// handlers (which read it).
#[derive(Clone, Debug, Default)]
pub struct PrometheusReader {
    reader: Arc<ManualReader>,
}

impl PrometheusReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every instrument's current figures, as Prometheus text.
    pub fn render(&self) -> anyhow::Result<String> {
        let mut metrics = ResourceMetrics::default();
        self.reader.collect(&mut metrics).context("collecting metrics")?;
        Ok(render(&metrics))
    }
}

impl MetricReader for PrometheusReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.reader.register_pipeline(pipeline);
    }

    fn collect(&self, metrics: &mut ResourceMetrics) -> OTelSdkResult {
        self.reader.collect(metrics)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.reader.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.reader.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        // The manual reader's default: running totals, what Prometheus expects.
        self.reader.temporality(kind)
    }
}

/// Where this process's metrics are read and whether a separate listener serves them.
struct Installed {
    reader: PrometheusReader,
    separate_listener: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Makes `reader` the one this process's scrape handlers read (the telemetry setup calls it
/// once; later calls are ignored). `separate_listener`: `/metrics` is served on its own address
/// (`--metrics-listen`), so services with a public HTTP port leave it off that port.
pub fn install(reader: PrometheusReader, separate_listener: bool) {
    let _ = INSTALLED.set(Installed { reader, separate_listener });
}

/// The reader installed for this process, if the telemetry setup ran.
pub fn installed() -> Option<PrometheusReader> {
    INSTALLED.get().map(|installed| installed.reader.clone())
}

/// Whether an HTTP service should answer `/metrics` on its own port: metrics are collected and
/// no separate metrics listener was asked for.
pub fn served_on_main_port() -> bool {
    INSTALLED.get().is_some_and(|installed| !installed.separate_listener)
}

/// `GET /metrics` (and HEAD) reading `reader`; every other path answers 404.
pub fn router(reader: PrometheusReader) -> Router {
    Router::new().route("/metrics", get(move || scrape(reader.clone())))
}

/// The `/metrics` answer for `reader`.
pub async fn scrape(reader: PrometheusReader) -> Response {
    // Collecting runs the observable gauges' callbacks, which may take locks: off the reactor.
    match tokio::task::spawn_blocking(move || reader.render()).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Ok(Err(err)) => {
            tracing::error!(error = %format!("{err:#}"), "metrics scrape failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "collecting metrics failed\n").into_response()
        }
        Err(err) => {
            tracing::error!(error = %err, "metrics scrape failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "collecting metrics failed\n").into_response()
        }
    }
}

/// A bound `/metrics` listener (port 0 picks a free port).
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
}

impl MetricsServer {
    /// Binds `addr` now, so a taken address fails at start-up rather than at the first scrape.
    pub fn bind(addr: SocketAddr) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("binding metrics listener {addr}"))?;
        listener.set_nonblocking(true).context("metrics listener")?;
        let listener = tokio::net::TcpListener::from_std(listener).context("metrics listener needs a tokio runtime")?;
        Ok(Self { listener })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves `reader` until `stop` is cancelled.
    pub async fn serve(self, reader: PrometheusReader, stop: CancellationToken) {
        let addr = self.local_addr();
        tracing::info!(%addr, "metrics listening (GET /metrics)");
        http_server::serve(self.listener, router(reader), HttpLimits::default(), stop.cancelled_owned()).await;
    }
}

/// Renders collected metrics in the Prometheus text exposition format (0.0.4).
pub fn render(metrics: &ResourceMetrics) -> String {
    // One family per rendered name, whichever meter it came from: Prometheus refuses a name
    // declared twice. The first instrument of a name wins; a later one of another kind is left out.
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            let Some(kind) = Kind::of(metric.data()) else { continue };
            let name = family_name(metric, kind);
            let family = families.entry(name.clone()).or_insert_with(|| Family {
                kind,
                help: metric.description().to_owned(),
                samples: String::new(),
            });
            if family.kind != kind {
                continue;
            }
            write_samples(&mut family.samples, &name, metric.data());
        }
    }
    let mut out = String::new();
    for (name, family) in families {
        if family.samples.is_empty() {
            continue;
        }
        if !family.help.is_empty() {
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
        }
        let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
        out.push_str(&family.samples);
    }
    out
}

struct Family {
    kind: Kind,
    help: String,
    samples: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn of(data: &AggregatedMetrics) -> Option<Self> {
        fn of<T>(data: &MetricData<T>) -> Option<Kind> {
            match data {
                MetricData::Sum(sum) if sum.is_monotonic() => Some(Kind::Counter),
                MetricData::Sum(_) | MetricData::Gauge(_) => Some(Kind::Gauge),
                MetricData::Histogram(_) => Some(Kind::Histogram),
                // No instrument here uses them; a scrape leaves them out rather than guess.
                MetricData::ExponentialHistogram(_) => None,
            }
        }
        match data {
            AggregatedMetrics::F64(data) => of(data),
            AggregatedMetrics::U64(data) => of(data),
            AggregatedMetrics::I64(data) => of(data),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A value as Prometheus reads it.
trait Sample: Copy {
    fn text(self) -> String;
    fn as_f64(self) -> f64;
}

impl Sample for u64 {
    fn text(self) -> String {
        self.to_string()
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Sample for i64 {
    fn text(self) -> String {
        self.to_string()
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Sample for f64 {
    fn text(self) -> String {
        float_text(self)
    }
    fn as_f64(self) -> f64 {
        self
    }
}

fn float_text(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        value.to_string()
    }
}

fn write_samples(out: &mut String, name: &str, data: &AggregatedMetrics) {
    match data {
        AggregatedMetrics::F64(data) => write_data(out, name, data),
        AggregatedMetrics::U64(data) => write_data(out, name, data),
        AggregatedMetrics::I64(data) => write_data(out, name, data),
    }
}

fn write_data<T: Sample>(out: &mut String, name: &str, data: &MetricData<T>) {
    match data {
        MetricData::Sum(sum) => {
            for point in sum.data_points() {
                write_line(out, name, "", point.attributes(), None, &point.value().text());
            }
        }
        MetricData::Gauge(gauge) => {
            for point in gauge.data_points() {
                write_line(out, name, "", point.attributes(), None, &point.value().text());
            }
        }
        MetricData::Histogram(histogram) => {
            for point in histogram.data_points() {
                let mut cumulative = 0u64;
                for (bound, count) in point.bounds().zip(point.bucket_counts()) {
                    cumulative += count;
                    let le = float_text(bound);
                    write_line(out, name, "_bucket", point.attributes(), Some(&le), &cumulative.to_string());
                }
                let count = point.count().to_string();
                write_line(out, name, "_bucket", point.attributes(), Some("+Inf"), &count);
                write_line(out, name, "_sum", point.attributes(), None, &float_text(point.sum().as_f64()));
                write_line(out, name, "_count", point.attributes(), None, &count);
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

fn write_line<'a>(
    out: &mut String,
    name: &str,
    suffix: &str,
    attributes: impl Iterator<Item = &'a KeyValue>,
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    out.push_str(suffix);
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for attribute in attributes {
        let key = sanitize(attribute.key.as_str());
        // Two keys that sanitise alike (`a.b`, `a_b`) are joined, as the OpenTelemetry rules ask.
        labels
            .entry(key)
            .and_modify(|value| {
                value.push(';');
                value.push_str(&attribute.value.as_str());
            })
            .or_insert_with(|| attribute.value.as_str().into_owned());
    }
    if let Some(le) = le {
        labels.insert("le".to_owned(), le.to_owned());
    }
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push_str("=\"");
            escape_label_value(out, value);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// The Prometheus name of an instrument: sanitised, with its unit and `_total` for counters.
fn family_name(metric: &Metric, kind: Kind) -> String {
    let mut name = sanitize(metric.name());
    if let Some(unit) = unit_suffix(metric.unit())
        && !name.ends_with(&format!("_{unit}"))
    {
        name.push('_');
        name.push_str(unit);
    }
    if kind == Kind::Counter && !name.ends_with("_total") {
        name.push_str("_total");
    }
    name
}

/// UCUM units as Prometheus suffixes; annotations (`{token}`) and dimensionless `1` add none.
fn unit_suffix(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "min" => "minutes",
        "h" => "hours",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "%" => "percent",
        // Not UCUM, but what money is counted in here (the router's cost).
        "USD" => "usd",
        _ => return None,
    })
}

/// A metric or label name Prometheus accepts: `[a-zA-Z_:][a-zA-Z0-9_:]*` for metrics (labels
/// without the colon), other characters as underscores, runs of them as one.
fn sanitize(raw: &str) -> String {
    let mut name = String::with_capacity(raw.len() + 1);
    for c in raw.chars() {
        let ok = c.is_ascii_alphanumeric() || c == '_';
        if ok {
            name.push(c);
        } else if !name.ends_with('_') {
            name.push('_');
        }
    }
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    use super::*;

    fn provider() -> (SdkMeterProvider, PrometheusReader) {
        let reader = PrometheusReader::new();
        (SdkMeterProvider::builder().with_reader(reader.clone()).build(), reader)
    }

    #[test]
    fn counters_histograms_and_gauges_render_with_units_and_escaped_labels() {
        let (provider, reader) = provider();
        let meter = provider.meter("test");
        let turns = meter.u64_counter("router.turns").with_description("Turns\nanswered").build();
        turns.add(2, &[KeyValue::new("route", "direct"), KeyValue::new("note", "a \"b\" \\ c\nd")]);
        turns.add(1, &[KeyValue::new("route", "agent")]);
        let latency =
            meter.f64_histogram("rpc.server.call.duration").with_unit("s").with_boundaries(vec![0.1, 1.0]).build();
        latency.record(0.05, &[KeyValue::new("rpc.method", "Chat")]);
        latency.record(0.5, &[KeyValue::new("rpc.method", "Chat")]);
        latency.record(5.0, &[KeyValue::new("rpc.method", "Chat")]);
        let depth = meter.i64_up_down_counter("records.buffer.depth").build();
        depth.add(3, &[]);

        let text = reader.render().unwrap();
        assert!(
            text.contains("# HELP router_turns_total Turns\\nanswered\n# TYPE router_turns_total counter\n"),
            "{text}"
        );
        assert!(text.contains("router_turns_total{note=\"a \\\"b\\\" \\\\ c\\nd\",route=\"direct\"} 2\n"), "{text}");
        assert!(text.contains("router_turns_total{route=\"agent\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE rpc_server_call_duration_seconds histogram\n"), "{text}");
        assert!(text.contains("rpc_server_call_duration_seconds_bucket{le=\"0.1\",rpc_method=\"Chat\"} 1\n"), "{text}");
        assert!(text.contains("rpc_server_call_duration_seconds_bucket{le=\"1\",rpc_method=\"Chat\"} 2\n"), "{text}");
        assert!(
            text.contains("rpc_server_call_duration_seconds_bucket{le=\"+Inf\",rpc_method=\"Chat\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("rpc_server_call_duration_seconds_sum{rpc_method=\"Chat\"} 5.55\n"), "{text}");
        assert!(text.contains("rpc_server_call_duration_seconds_count{rpc_method=\"Chat\"} 3\n"), "{text}");
        assert!(text.contains("# TYPE records_buffer_depth gauge\nrecords_buffer_depth 3\n"), "{text}");
    }

    #[test]
    fn an_instrument_with_no_measurement_is_left_out() {
        let (provider, reader) = provider();
        let _unused = provider.meter("test").u64_counter("never.used").build();
        assert_eq!(reader.render().unwrap(), "");
    }

    #[test]
    fn names_are_sanitised_and_suffixes_not_doubled() {
        assert_eq!(sanitize("mcp_gateway.tool-call.duration"), "mcp_gateway_tool_call_duration");
        assert_eq!(sanitize("9lives"), "_9lives");
        assert_eq!(sanitize("gen_ai.usage..tokens"), "gen_ai_usage_tokens");
        let (provider, reader) = provider();
        let meter = provider.meter("test");
        meter.u64_counter("requests_total").build().add(1, &[]);
        meter.f64_histogram("wait_seconds").with_unit("s").build().record(1.0, &[]);
        meter.f64_counter("switchyard.cost").with_unit("USD").build().add(0.25, &[]);
        let text = reader.render().unwrap();
        assert!(text.contains("switchyard_cost_usd_total 0.25\n"), "{text}");
        assert!(text.contains("requests_total 1\n") && !text.contains("requests_total_total"), "{text}");
        assert!(text.contains("wait_seconds_count 1\n") && !text.contains("seconds_seconds"), "{text}");
    }
}
