"""slorouter: the OpenAI-compatible routing service (HTTP API, pipeline, execution, providers)."""

__version__ = "0.1.0"
