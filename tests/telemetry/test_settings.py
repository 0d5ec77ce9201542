"""`TelemetrySettings`: safe defaults, strict validation, environment overrides."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router.telemetry.settings import TelemetrySettings
from router.telemetry.setup import build_telemetry
from tests.telemetry.helpers import CLIENT_TRACEPARENT


def test_defaults_export_nothing_and_capture_no_content() -> None:
    """By default no trace exporter runs, /metrics is on, and no tenant's content is kept."""
    settings = TelemetrySettings()
    assert (settings.exporter, settings.traces_enabled, settings.prometheus) == (
        "none", False, True)
    assert not settings.captures_content("tenant-one")


def test_unknown_fields_and_exporters_are_rejected() -> None:
    """A typo in the telemetry section fails at start-up instead of being ignored."""
    with pytest.raises(ValidationError):
        TelemetrySettings.model_validate({"exporter": "jaeger"})
    with pytest.raises(ValidationError):
        TelemetrySettings.model_validate({"exproter": "otlp"})


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4318", "not a url", "grpc://c:4317",
                                      "http://", ""])
def test_an_otlp_endpoint_the_exporter_cannot_post_to_is_refused(endpoint: str) -> None:
    """Refused at load, naming the field: it used to start and log a failed export forever."""
    with pytest.raises(ValidationError, match="otlp_endpoint"):
        TelemetrySettings.model_validate({"exporter": "otlp", "otlp_endpoint": endpoint})
    assert TelemetrySettings(otlp_endpoint="https://collector.example:4318").otlp_endpoint


def test_environment_selects_exporter_endpoint_ratio_and_opted_in_tenants() -> None:
    """SLOROUTER_* and the standard OTEL_* variables configure telemetry."""
    settings = TelemetrySettings.from_env({
        "SLOROUTER_TELEMETRY_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "SLOROUTER_TELEMETRY_SAMPLE_RATIO": "0.25", "OTEL_METRIC_EXPORT_INTERVAL": "5000",
        "SLOROUTER_CAPTURE_CONTENT_TENANTS": "acme, beta"})
    assert (settings.exporter, settings.otlp_endpoint, settings.sample_ratio) == (
        "otlp", "http://c:4318", 0.25)
    assert settings.metrics_export_interval_s == 5.0  # OTEL_METRIC_EXPORT_INTERVAL is in ms
    assert settings.captures_content("acme") and not settings.captures_content("gamma")


@pytest.mark.parametrize(("value", "enabled"), [("off", False), ("FALSE", False), ("0", False),
                                               ("on", True), ("True", True), ("1", True),
                                               ("", True)])
def test_the_telemetry_switch_reads_its_documented_words(value: str, enabled: bool) -> None:
    assert TelemetrySettings.from_env({"SLOROUTER_TELEMETRY": value}).enabled is enabled


@pytest.mark.parametrize("value", ["no", "disabled", "of", "none"])
def test_a_telemetry_switch_that_is_no_known_word_is_refused_not_read_as_on(value: str) -> None:
    """`SLOROUTER_TELEMETRY=no` (or a typo) left telemetry on without a word; `serve` now stops
    naming the variable, as for the other telemetry variables."""
    with pytest.raises(ValidationError, match="SLOROUTER_TELEMETRY takes off"):
        TelemetrySettings.from_env({"SLOROUTER_TELEMETRY": value})


def test_a_metric_export_interval_that_is_not_a_positive_number_is_rejected() -> None:
    """Under a second is refused too: `OTEL_METRIC_EXPORT_INTERVAL=15` (seconds meant, the
    variable is in milliseconds) loaded as 15 ms, an export every 15 ms beside the event loop."""
    for bad in ("soon", "0", "-5000", "15", "999"):
        with pytest.raises(ValidationError, match="metrics_export_interval_s"):
            TelemetrySettings.from_env({"OTEL_METRIC_EXPORT_INTERVAL": bad})


@pytest.mark.parametrize(("setting", "says"), [
    ({"metrics_export_interval_s": float("inf")}, "finite"),
    ({"metrics_export_interval_s": float("nan")}, "finite"),
    ({"metrics_export_interval_s": 1e10}, "less than or equal to 86400"),
    ({"flush_delay_s": float("inf")}, "finite"),
])
def test_an_infinite_or_enormous_interval_is_refused_naming_the_field(
        setting: dict[str, float], says: str) -> None:
    """`.inf`, or more than ~9.2e9 s, loaded and then killed the metric export thread with an
    OverflowError at start (the misconfiguration audit); a day is the longest interval taken."""
    (name,) = setting
    with pytest.raises(ValidationError, match=name) as caught:
        TelemetrySettings.model_validate({"exporter": "otlp", **setting})
    assert says in str(caught.value)
    with pytest.raises(ValidationError, match="metrics_export_interval_s"):
        TelemetrySettings.from_env({"OTEL_METRIC_EXPORT_INTERVAL": "inf"})
    assert TelemetrySettings(metrics_export_interval_s=86_400).metrics_export_interval_s == 86_400
    one_second = TelemetrySettings.from_env({"OTEL_METRIC_EXPORT_INTERVAL": "1000"})
    assert one_second.metrics_export_interval_s == 1.0


def test_a_sample_ratio_of_zero_still_exports_the_traces_clients_sample() -> None:
    """`sample_ratio` is the share of new traces kept; a client's sampled `traceparent` is
    always followed, so 0 must not switch span export off (it did: no processor was built,
    and the upstream was sent the ids of spans that were never exported)."""
    settings = TelemetrySettings.model_validate({"exporter": "console", "sample_ratio": 0.0})
    telemetry = build_telemetry(settings, {})
    try:
        assert telemetry.span_processor is not None
        trace = telemetry.start_trace(CLIENT_TRACEPARENT)
        assert trace.sampled and trace.exported
        assert not telemetry.start_trace(None).sampled
    finally:
        telemetry.shutdown()
    off = build_telemetry(TelemetrySettings(), {})
    assert off.span_processor is None and not off.start_trace(CLIENT_TRACEPARENT).exported
    off.shutdown()
