"""`TelemetrySettings`: which exporter, where, how much to sample, whose content may be kept.

A pydantic model (`extra="forbid"`) so it can sit in the router's YAML under `telemetry:` or be
read from the environment with `TelemetrySettings.from_env` (`SLOROUTER_TELEMETRY_*` and the
standard `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_METRIC_EXPORT_INTERVAL`). Defaults: no trace
exporter, Prometheus `/metrics` on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from policies.config_model import ConfigModel

Exporter = Literal["none", "console", "otlp"]
# SLOROUTER_TELEMETRY's words (any case); anything else is refused, not read as "on".
_SWITCH: dict[str, bool] = {"off": False, "false": False, "0": False,
                            "on": True, "true": True, "1": True}


class TelemetrySettings(ConfigModel):
    # Infinity is no interval or delay (an infinite export interval killed the export thread).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = True  # false: no telemetry at all (for measuring what it costs)
    exporter: Exporter = "none"
    otlp_endpoint: str = "http://127.0.0.1:4318"  # OTLP/HTTP: an http(s) URL with a host
    otlp_headers: dict[str, str] = Field(default_factory=dict)
    service_name: str = "slorouter"
    sample_ratio: float = Field(default=0.1, ge=0.0, le=1.0)  # for new roots; see docs
    prometheus: bool = True
    # From a second to a day: `OTEL_METRIC_EXPORT_INTERVAL=15`, seconds meant, is 15 ms, and an
    # export holds the interpreter for milliseconds (the loop would wait behind 66 a second).
    metrics_export_interval_s: float = Field(default=15.0, ge=1.0, le=86_400)
    flush_delay_s: float = Field(default=0.05, ge=0)  # least time between two queue flushes
    queue_max: int = Field(default=20_000, ge=1)
    capture_content_tenants: frozenset[str] = frozenset()

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """Refused at load, not logged at every export: `127.0.0.1:4318` (no scheme) or any
        other text the OTLP/HTTP exporters cannot post to."""
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("otlp_endpoint must be an http:// or https:// URL with a host "
                             "(OTLP over HTTP, e.g. http://127.0.0.1:4318)")
        return value

    @property
    def traces_enabled(self) -> bool:
        """Spans are exported (with `sample_ratio` 0 too: a client's sampled trace is kept)."""
        return self.exporter != "none"

    def captures_content(self, tenant: str) -> bool:
        """Content capture is an explicit per-tenant opt-in; nobody is opted in by default."""
        return tenant in self.capture_content_tenants

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TelemetrySettings:
        values: dict[str, object] = {}
        switch = environ.get("SLOROUTER_TELEMETRY", "").strip().lower()
        if switch and switch not in _SWITCH:
            raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                type=PydanticCustomError(
                    "telemetry_switch", "SLOROUTER_TELEMETRY takes off, false or 0 (telemetry "
                    "off) or on, true or 1 (the default), not other text"),
                loc=("enabled",), input=switch)])
        if switch:
            values["enabled"] = _SWITCH[switch]
        exporter = environ.get("SLOROUTER_TELEMETRY_EXPORTER")
        if exporter is not None:
            values["exporter"] = exporter
        endpoint = environ.get("SLOROUTER_OTLP_ENDPOINT",
                               environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        if endpoint is not None:
            values["otlp_endpoint"] = endpoint
        ratio = environ.get("SLOROUTER_TELEMETRY_SAMPLE_RATIO")
        if ratio is not None:
            values["sample_ratio"] = ratio  # validated (and converted) with the rest
        interval_ms = environ.get("OTEL_METRIC_EXPORT_INTERVAL")  # the SDK's variable, in ms
        if interval_ms is not None:
            values["metrics_export_interval_s"] = _milliseconds_as_s(interval_ms)
        service = environ.get("OTEL_SERVICE_NAME")
        if service is not None:
            values["service_name"] = service
        tenants = environ.get("SLOROUTER_CAPTURE_CONTENT_TENANTS")
        if tenants:
            values["capture_content_tenants"] = frozenset(t.strip() for t in tenants.split(",")
                                                          if t.strip())
        return cls.model_validate(values)


def _milliseconds_as_s(text: str) -> object:
    """`OTEL_METRIC_EXPORT_INTERVAL` (milliseconds) in seconds; text that is not a number is
    passed on as it is, for the model's validation to report."""
    try:
        return float(text) / 1000
    except ValueError:
        return text
