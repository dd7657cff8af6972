//! The host's own metrics over OTLP (HTTP/protobuf), with the official OpenTelemetry SDK:
//! on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is set,
//! as for Claude Code, which gets the same variables. The exporter reads the standard
//! variables itself (endpoint, headers, timeout); `OTEL_METRIC_EXPORT_INTERVAL` sets how often
//! (default 60 s). `OTEL_METRICS_EXPORTER` without `otlp` in it turns the host's export off.
//! The exporter is the cargo feature `otlp`; a build without it says so when asked to export.

use opentelemetry::metrics::Meter;
#[cfg(feature = "otlp")]
use opentelemetry::metrics::MeterProvider;
#[cfg(feature = "otlp")]
use opentelemetry_sdk::metrics::SdkMeterProvider;

/// The meter provider, when metrics are exported; flushed and stopped when dropped.
pub(crate) struct Metrics {
    #[cfg(feature = "otlp")]
    provider: Option<SdkMeterProvider>,
}

impl Metrics {
    /// Metrics as the environment asks (`get` reads a variable).
    pub(crate) fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Metrics {
        let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let endpoint = set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
        if endpoint.is_none() {
            return Metrics::none();
        }
        if let Some(exporters) = set("OTEL_METRICS_EXPORTER")
            && !exporters.split(',').any(|e| e.trim() == "otlp")
        {
            return Metrics::none();
        }
        Metrics::exporter(&set)
    }

    fn none() -> Metrics {
        Metrics {
            #[cfg(feature = "otlp")]
            provider: None,
        }
    }

    #[cfg(not(feature = "otlp"))]
    fn exporter(_: &dyn Fn(&str) -> Option<String>) -> Metrics {
        tracing::warn!(
            "this claude-host was built without OTLP export, so the host's own metrics are not exported (Claude Code's are); the release binaries and the npm package have it, or build with `--features otlp`"
        );
        Metrics::none()
    }

    #[cfg(feature = "otlp")]
    fn exporter(set: &dyn Fn(&str) -> Option<String>) -> Metrics {
        let protocol = set("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".to_owned());
        if protocol != "http/protobuf" {
            tracing::warn!(%protocol, "the host exports its metrics over OTLP http/protobuf only; set OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf (and its endpoint) for them");
            return Metrics::none();
        }
        let exporter = match opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .build()
        {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "cannot export the host's metrics over OTLP");
                return Metrics::none();
            }
        };
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("claude-host")
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_periodic_exporter(exporter)
            .with_resource(resource)
            .build();
        tracing::debug!("exporting the host's metrics over OTLP");
        Metrics {
            provider: Some(provider),
        }
    }

    /// The meter the proxy and the agent count with, when metrics are exported.
    pub(crate) fn meter(&self) -> Option<Meter> {
        #[cfg(feature = "otlp")]
        return self.provider.as_ref().map(|p| p.meter("claude-host"));
        #[cfg(not(feature = "otlp"))]
        None
    }
}

#[cfg(feature = "otlp")]
impl Drop for Metrics {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            tracing::debug!(error = %e, "the last metrics export failed");
        }
    }
}
