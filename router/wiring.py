"""From a validated configuration to a running app: the concrete parts `serve` uses.

Kept apart from `router.app` (which takes parts) so tests and benchmarks can build the app
from their own parts, and apart from `serve_cli` (process concerns: ports, children, signals).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI

from policies.schema import RouterConfig
from router.app import build_app
from router.outcomes import LogSink
from router.providers.base import AdapterName, Provider
from router.runtime_config import RuntimeConfig, resolve


def build_from_config(config: RouterConfig,
                      environ: Mapping[str, str]) -> tuple[FastAPI, RuntimeConfig]:
    from router.classify import load_default_classifier
    from router.providers.litellm_adapter import LitellmProvider, default_prices
    from router.providers.passthrough import PassthroughProvider

    classifier = load_default_classifier()
    runtime = resolve(config, environ, default_prices, classifier.version)
    providers: dict[AdapterName, Provider] = {
        "openai_passthrough": PassthroughProvider(),
        "litellm": LitellmProvider(),
    }
    app = build_app(runtime, classifier, providers, sinks=[LogSink()])
    return app, runtime
