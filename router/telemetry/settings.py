"""`TelemetrySettings` lives with the rest of the configuration model (`policies.telemetry`)."""

from policies.telemetry import Exporter, TelemetrySettings

__all__ = ["Exporter", "TelemetrySettings"]
