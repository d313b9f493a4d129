//! The process's telemetry: its log on stderr and, when a collector is
//! configured, the export of trace spans over OTLP/HTTP (protobuf).
//!
//! Log lines go to stderr as `text` or `json` (`eventmesh.log.format`),
//! filtered by `RUST_LOG` (default `info`). The spans of an event's path
//! (target [`TARGET`], see `eventmesh_runtime::trace`) never reach the
//! log: its filter turns that target off.
//!
//! With `eventmesh.tracing.otlp.endpoint` set, an OpenTelemetry layer takes
//! exactly that target and hands each finished span to a batch processor,
//! whose own thread posts them to `<endpoint>/v1/traces`; the data path
//! never waits for the collector (a full queue drops spans, it does not
//! block). Without an endpoint there is no OpenTelemetry layer at all, so
//! the spans are disabled at their callsites.
//!
//! Invariant: [`Telemetry::shutdown`] is called once the runtime has
//! stopped, so the spans of the last requests are sent before exit.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use eventmesh_core::config::{LogConfig, LogFormat, TracingConfig};
use eventmesh_runtime::trace::TARGET;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Bound on one export call to the collector.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What has to be flushed at exit.
pub struct Telemetry {
    /// `None` when no spans are exported.
    provider: Option<SdkTracerProvider>,
}

/// The OTLP/HTTP traces URL of a collector's base URL (kept as it is when
/// it already names the traces path).
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The log filter: `RUST_LOG`, or `info`; the spans' target is always off.
fn log_filter() -> EnvFilter {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    match format!("{TARGET}=off").parse() {
        Ok(off) => filter.add_directive(off),
        // The directive is a constant that parses; keep the filter if not.
        Err(_) => filter,
    }
}

/// Installs the global subscriber: the log, plus the OpenTelemetry layer
/// when `trace` names a collector. Fails only on an endpoint that the
/// exporter cannot use.
pub fn init(log: &LogConfig, trace: &TracingConfig) -> anyhow::Result<Telemetry> {
    let Some(endpoint) = &trace.otlp_endpoint else {
        // No export: the log alone, filtered globally, as it always was.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(log_filter())
            .with_writer(std::io::stderr);
        match log.format {
            LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
            LogFormat::Json => builder.json().with_current_span(false).init(),
        }
        return Ok(Telemetry { provider: None });
    };
    let url = traces_url(endpoint);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .with_context(|| {
            let (endpoint, url) = (
                eventmesh_core::redact::url(endpoint),
                eventmesh_core::redact::url(&url),
            );
            format!("eventmesh.tracing.otlp.endpoint {endpoint:?}: cannot export spans to {url}")
        })?;
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(trace.sample_ratio)));
    let resource = Resource::builder()
        .with_service_name(trace.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(resource)
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("eventmesh"))
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO));
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log_layer = match log.format {
        LogFormat::Text => stderr.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => stderr.json().with_current_span(false).boxed(),
    };
    tracing_subscriber::registry()
        .with(log_layer.with_filter(log_filter()))
        .with(spans)
        .init();
    tracing::info!(
        endpoint = %eventmesh_core::redact::url(&url),
        sample_ratio = trace.sample_ratio,
        "exporting trace spans over OTLP/HTTP"
    );
    Ok(Telemetry {
        provider: Some(provider),
    })
}

impl Telemetry {
    /// Sends the spans still queued and stops the exporter (bounded by the
    /// export timeout); a collector that is down is logged, not fatal.
    pub fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        match provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            Ok(()) => tracing::info!("trace spans flushed"),
            Err(e) => tracing::warn!(error = %e, "flushing trace spans failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once() {
        let url = |e: &str| traces_url(e);
        assert_eq!(url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(url("https://c/otel"), "https://c/otel/v1/traces");
        assert_eq!(url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
    }
}
