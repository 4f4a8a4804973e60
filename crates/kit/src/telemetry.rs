//! Logging, tracing and metrics: `tracing` with an env filter (text or JSON lines), an
//! OpenTelemetry layer so every span has a W3C trace context, and OTLP export of traces and
//! metrics (instruments from `opentelemetry::global::meter`) when an endpoint is set; the same
//! instruments are always readable as Prometheus text (`metrics_export`), served on
//! `--metrics-listen` when set.
//!
//! The OpenTelemetry layer is installed only when traces are exported: without an exporter
//! it would cost every request span some work and show nothing. Configure the OTLP endpoint
//! on every service of a deployment so one request is one trace across all of them.

use std::net::SocketAddr;

use http::HeaderMap;
use opentelemetry::{
    Context,
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::TracerProvider as _,
};
use opentelemetry_sdk::{
    Resource,
    metrics::SdkMeterProvider,
    propagation::TraceContextPropagator,
    trace::{Sampler, SdkTracerProvider},
};
use tokio_util::sync::CancellationToken;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

use crate::{
    config::{LogFormat, TelemetryArgs},
    metrics_export::{self, MetricsServer, PrometheusReader},
};

/// Keeps the tracer and meter providers alive; flushes pending spans and metrics when dropped
/// and stops the metrics listener.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
    _metrics: MetricsGuard,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(err) = self.provider.shutdown() {
            eprintln!("telemetry shutdown: {err}");
        }
    }
}

/// Keeps the meter provider alive; on drop, stops the metrics listener and flushes the export.
pub struct MetricsGuard {
    meters: SdkMeterProvider,
    listener: CancellationToken,
}

impl Drop for MetricsGuard {
    fn drop(&mut self) {
        self.listener.cancel();
        if let Err(err) = self.meters.shutdown() {
            eprintln!("metrics shutdown: {err}");
        }
    }
}

/// Installs the global subscriber and propagator, and starts the heap trimmer
/// (`--heap-trim-interval`, [`crate::heap::spawn_trimmer`]). Call once, at the start of `main`,
/// from within the tokio runtime.
pub fn init(service_name: &'static str, args: &TelemetryArgs) -> anyhow::Result<TelemetryGuard> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    crate::heap::spawn_trimmer(args.heap_trim_interval);
    crate::log::set_repeat_interval(args.log_repeat_interval);
    let resource = Resource::builder().with_service_name(service_name).build();
    let provider = match &args.otlp_endpoint {
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let exporter =
                opentelemetry_otlp::SpanExporter::builder().with_tonic().with_endpoint(endpoint.clone()).build()?;
            SdkTracerProvider::builder()
                .with_resource(resource)
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
                .with_batch_exporter(exporter)
                .build()
        }
        None => SdkTracerProvider::builder()
            .with_resource(resource)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOff)))
            .build(),
    };
    opentelemetry::global::set_tracer_provider(provider.clone());
    let meters = init_metrics(service_name, args.otlp_endpoint.as_deref(), args.metrics_listen)?;
    let otel =
        args.otlp_endpoint.is_some().then(|| tracing_opentelemetry::layer().with_tracer(provider.tracer(service_name)));

    // rmcp logs every MCP message at info (with whole server instructions); warnings are enough.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    // Logs go to stderr: stdout is the MCP channel when the gateway runs in stdio mode, and
    // container runtimes collect both streams alike.
    match args.log_format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init()?,
    }
    Ok(TelemetryGuard { provider, _metrics: meters })
}

/// Installs the process's meter provider (part of [`init`]; alone, for tests that read
/// `/metrics` without the rest): always a Prometheus pull reader (so `/metrics` shows the
/// instruments whether or not anything exports them), and the periodic OTLP exporter when an
/// endpoint is set; both read the same instruments. With `metrics_listen`, `/metrics` is
/// served there (bound now, so a taken address fails at start-up). Call once, from within a
/// tokio runtime, before the services make their instruments.
pub fn init_metrics(
    service_name: &'static str,
    otlp_endpoint: Option<&str>,
    metrics_listen: Option<SocketAddr>,
) -> anyhow::Result<MetricsGuard> {
    let prometheus = PrometheusReader::new();
    let mut builder = SdkMeterProvider::builder()
        .with_resource(Resource::builder().with_service_name(service_name).build())
        .with_reader(prometheus.clone());
    if let Some(endpoint) = otlp_endpoint {
        use opentelemetry_otlp::WithExportConfig;
        let exporter =
            opentelemetry_otlp::MetricExporter::builder().with_tonic().with_endpoint(endpoint.to_owned()).build()?;
        builder = builder.with_periodic_exporter(exporter);
    }
    let meters = builder.build();
    opentelemetry::global::set_meter_provider(meters.clone());
    metrics_export::install(prometheus.clone(), metrics_listen.is_some());
    let stop = CancellationToken::new();
    if let Some(addr) = metrics_listen {
        let server = MetricsServer::bind(addr)?;
        tokio::spawn(server.serve(prometheus, stop.clone()));
    }
    Ok(MetricsGuard { meters, listener: stop })
}

/// The trace context carried by incoming request headers (`traceparent`, `tracestate`).
pub fn extract_context(headers: &HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes the current span's trace context into outgoing request headers.
pub fn inject_current_context(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value))
        {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt;

    use super::*;

    #[test]
    fn a_traceparent_header_round_trips() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let context = extract_context(&headers);
        let span = context.span();
        let span_context = span.span_context();
        assert_eq!(span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(span_context.is_remote());

        let mut out = HeaderMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(&mut out));
        assert_eq!(
            out.get("traceparent").and_then(|v| v.to_str().ok()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }
}
