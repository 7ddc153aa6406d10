"""Build the app's ``Observability`` from the ``obs`` settings section."""

from __future__ import annotations

import os

from blink.config.gateway import ObsSettings
from blink.obs.engine_collector import LoadSource
from blink.obs.observer import Observability
from blink.obs.request_log import RequestLogger
from blink.obs.tracing import Tracing


def otlp_endpoint(settings: ObsSettings) -> str | None:
    """The configured endpoint, else the standard OpenTelemetry environment variables."""
    if settings.otlp_endpoint:
        return settings.otlp_endpoint
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def build_observability(settings: ObsSettings | None, loads: LoadSource | None = None) -> Observability:
    settings = settings or ObsSettings.model_validate({})
    endpoint = otlp_endpoint(settings)
    tracing = Tracing.otlp(endpoint, settings.service_name, settings.trace_sample_ratio) if endpoint else None
    request_log = None
    if settings.request_log != "off":
        request_log = RequestLogger.to_target(settings.request_log, log_prompts=settings.log_prompts,
                                              redact_pii=settings.redact_pii)
    return Observability(loads=loads, metrics=settings.metrics, tracing=tracing, request_log=request_log,
                         live=settings.dashboard)
