"""Traces, metrics and privacy guards for slorouter (OpenTelemetry GenAI semantic conventions).

What lives here: W3C trace-context helpers (`context`), the pydantic `TelemetrySettings`,
span construction after the fact from an `Outcome` (`spans`), GenAI and slorouter metrics
(`metrics`), the Prometheus text endpoint (`prometheus`), log redaction (`redact`) and the one
place that assembles exporters (`setup`). What does not: the request path. The handler records an
`Outcome`; `TelemetrySink` (an `OutcomeSink`) turns it into spans and metrics off the hot path.
"""

from router.telemetry.context import TraceContext, attempt_traceparent, start_trace
from router.telemetry.settings import TelemetrySettings

__all__ = ["TelemetrySettings", "TraceContext", "attempt_traceparent", "start_trace"]
