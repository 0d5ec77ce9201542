"""An in-process slorouter (the real `build_app`, uvicorn, pass-through provider, and the litellm
one when a deployment uses it) with telemetry.

The app is composed the way `router.wiring` composes it, plus `TelemetrySink` among the sinks
and `GET /metrics`; it serves on a loopback port inside the test's event loop. The classifier is
a fixed-label one (explicit hints win, else chat/low): the trained model is another issue's
artifact, and nothing here depends on what it predicts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn

from policies.loader import load_config_text
from router.app import build_app
from router.classify.types import Hints, Labels, RequestView
from router.outcomes import LogSink
from router.providers.base import AdapterName, Provider
from router.providers.passthrough import PassthroughProvider
from router.runtime_config import resolve
from router.telemetry.setup import Telemetry
from router.wiring import litellm_in_use, result_caching
from tests.support.procs import free_port

API_KEY = "sk-tenant-key-0123456789abcdef"
CONFIG = """version: 1
deployments:
  - name: pt-fast
    model: openai/fast
    adapter: openai_passthrough
    api_base: {base}/v1
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
  - name: pt-broken
    model: openai/broken
    adapter: openai_passthrough
    api_base: {base}/v1
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
models:
  - name: fast
    deployments: [pt-fast]
  - name: chain
    deployments: [pt-broken, pt-fast]
routes:
  aliases: [auto]
  default_model: fast
api_keys:
  - key: env:TENANT_KEY
    tenant: tenant-one
"""


@dataclass(frozen=True)
class FixedClassifier:
    version: str = "fixed-1"

    def classify(self, request: RequestView, hints: Hints) -> Labels:
        return Labels(task=hints.task or "chat", risk=hints.risk or "low",
                      task_source="hint" if hints.task else "default")


@contextlib.asynccontextmanager
async def serve(sim_base: str, telemetry: Telemetry, extra: str = "",
                whole_config: str | None = None,
                env: Mapping[str, str] | None = None,
                wrap: Callable[[Any], Any] | None = None) -> AsyncIterator[str]:
    """Serve the router on a free port until the block ends; yields its base URL. `extra`:
    more top-level YAML (a `server:` section); given, the result cache it configures is used
    (without it there is none, so no test writes a cache into the working directory).
    `whole_config`: a config of the test's own instead (no result cache), its keys in `env`.
    `wrap`: an ASGI app around the router's (to see the messages it sends uvicorn)."""
    text = whole_config if whole_config is not None else CONFIG.format(base=sim_base) + extra
    config = load_config_text(text)
    runtime = resolve(config, {"TENANT_KEY": API_KEY, **(env or {})}, lambda _: None, "fixed-1")
    providers: dict[AdapterName, Provider] = {"openai_passthrough": PassthroughProvider()}
    if litellm_in_use(runtime.deployments.values()):
        from router.providers.litellm_adapter import LitellmProvider

        providers["litellm"] = LitellmProvider()
    app = build_app(runtime, FixedClassifier(), providers,
                    sinks=[LogSink()], telemetry=telemetry,
                    caching=result_caching(config) if extra else None)
    port = free_port()
    served_app = wrap(app) if wrap is not None else app
    server = uvicorn.Server(uvicorn.Config(served_app, host="127.0.0.1", port=port, log_config=None,
                                           lifespan="on", loop="asyncio", access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
