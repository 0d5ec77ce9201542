"""The composition root: the one place that wires concrete classes into the ASGI app.

`build_app` takes already-built parts (config, classifier, providers, sinks, readiness checks),
so tests and benchmarks can compose the same app differently; `router.serve_cli` builds the
parts from files and the environment.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cache.policy import CacheRule
from router.admission import AdmissionController
from router.api.chat import ChatHandler
from router.api.errors import error_response
from router.api.explain import explain_endpoint
from router.api.meta import (
    ReadinessCheck,
    deployments_health,
    healthz,
    models_endpoint,
    readyz_endpoint,
)
from router.caching import ResultCaching
from router.classify.types import Classifier
from router.errors import NotFoundError, RequestError
from router.execution.runner import Runner
from router.idempotency import IdempotencyStore, MemoryIdempotencyStore
from router.outcomes import FanOut, OutcomeSink
from router.pipeline import ChatPipeline
from router.providers.base import AdapterName, Provider
from router.reliability import admission_controller, execution_state
from router.runtime_config import RuntimeConfig


def build_app(config: RuntimeConfig, classifier: Classifier,
              providers: Mapping[AdapterName, Provider], sinks: Sequence[OutcomeSink],
              checks: Sequence[ReadinessCheck] = (),
              admission: AdmissionController | None = None,
              idempotency: IdempotencyStore | None = None,
              caching: ResultCaching | None = None) -> FastAPI:
    reliability = config.source.server.reliability
    execution = execution_state(reliability)
    runner = Runner(providers, execution, clock=time.perf_counter)
    breakers = execution.breakers
    pipeline = ChatPipeline(config, classifier, runner,
                            health=lambda name: breakers.state(name) != "open")
    chat = ChatHandler(pipeline, FanOut(sinks),
                       admission if admission is not None else admission_controller(reliability),
                       idempotency if idempotency is not None else MemoryIdempotencyStore(
                           time.monotonic),
                       caching if caching is not None else ResultCaching(None, CacheRule(False)))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for provider in providers.values():
            await provider.aclose()

    app = FastAPI(title="slorouter", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_route("/v1/chat/completions", chat.handle, methods=["POST"])
    app.add_route("/v1/route/explain", explain_endpoint(pipeline), methods=["POST"])
    app.add_route("/v1/models", models_endpoint(config), methods=["GET"])
    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/v1/health/deployments", deployments_health(breakers), methods=["GET"])
    app.add_route("/readyz", readyz_endpoint(checks, config.version), methods=["GET"])
    app.add_exception_handler(HTTPException, _http_error)
    return app


async def _http_error(_: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response(NotFoundError("no such endpoint", code="unknown_url"))
    err = RequestError(f"{status}: {getattr(exc, 'detail', '')}", code="http_error")
    err.status_code = status
    return error_response(err)
