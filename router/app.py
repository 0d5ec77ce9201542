"""The composition root: the one place that wires concrete classes into the ASGI app.

`build_app` takes already-built parts (config, classifier, providers, sinks, readiness checks,
optionally the admission controller, idempotency store, result cache, and the `InFlight`
requests that a shutting-down server ends when its grace is over), so tests and benchmarks can
compose the same app differently; `router.wiring` builds the parts from files and the environment.
Process-wide state (breakers, budgets, latency statistics, SLO windows) is created here, once,
and shut down in the lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cache.policy import CacheRule
from router import gauges
from router.admission import AdmissionController
from router.api.chat import ChatHandler
from router.api.experiments import experiments_endpoint, feedback_endpoint
from router.api.explain import explain_endpoint
from router.api.front import FrontDoor
from router.api.meta import (
    ReadinessCheck,
    deployments_health,
    healthz,
    model_endpoint,
    models_endpoint,
    readyz_endpoint,
)
from router.api.sse import InFlight
from router.api.unrouted import http_error
from router.caching import ResultCaching
from router.classify.types import Classifier
from router.execution.runner import Runner
from router.experimentation import Experiments, memory_store
from router.feedback import (
    HedgeDelays,
    StatsRanker,
    StatsSink,
    service_availability,
    targets_by_task,
)
from router.idempotency import IdempotencyStore, MemoryIdempotencyStore
from router.logs import loop_error_event
from router.outcomes import FanOut, OutcomeSink
from router.pipeline import ChatPipeline
from router.providers.base import AdapterName, Provider
from router.readiness import deployments_check, stats_check
from router.reliability import admission_controller, execution_state
from router.runtime_config import RuntimeConfig
from router.slo import SloTracker
from router.stats import LocalStatsStore, StatsConfig, StatsStore
from router.telemetry.setup import Telemetry

YOUNG_GC_THRESHOLD = 20_000  # container allocations between young-generation scans (default 700)


def build_app(config: RuntimeConfig, classifier: Classifier,
              providers: Mapping[AdapterName, Provider], sinks: Sequence[OutcomeSink],
              checks: Sequence[ReadinessCheck] = (),
              admission: AdmissionController | None = None,
              idempotency: IdempotencyStore | None = None,
              caching: ResultCaching | None = None,
              stats: StatsStore | None = None,
              experiments: Experiments | None = None,
              telemetry: Telemetry | None = None,
              in_flight: InFlight | None = None) -> FrontDoor:
    server = config.source.server
    execution = execution_state(server.reliability)
    breakers = execution.breakers
    store = stats if stats is not None else LocalStatsStore(
        StatsConfig(half_life_s=server.stats.half_life_s))
    execution.watch = store  # attempts still waiting for a first token weigh on the scoring
    slo = SloTracker(targets_by_task(config.source.policies),
                     service_availability=service_availability(config.source.policies))
    ranker = StatsRanker(config, store, slo, breakers.is_open,
                         random.Random(), explore_share=server.stats.explore_share)
    trials = experiments if experiments is not None else Experiments(
        config.source.experiments, memory_store())
    pipeline = ChatPipeline(config, classifier, Runner(providers, execution, time.perf_counter),
                            ranker=ranker, health=lambda name: not breakers.is_open(name),
                            hedge_delay=HedgeDelays(store, server.reliability.hedge_percentile,
                                                   server.reliability.hedge_max_median_ratio),
                            load=store.load,
                            assign_arm=trials.assign if trials.active else None,
                            expose_arm=trials.expose if trials.active else None)
    observers = [*sinks, StatsSink(store, slo), trials]
    controller = admission if admission is not None else admission_controller(server.reliability)
    if telemetry is not None:
        observers.append(telemetry.sink)
        gauges.register(telemetry.metrics, breakers, slo)
        gauges.register_admission(telemetry.metrics, controller)
        gauges.register_evals(telemetry.metrics, config.quality)
        if caching is not None and caching.metrics is not None:
            gauges.register_cache(telemetry.metrics, caching.metrics)
    chat = ChatHandler(
        pipeline, FanOut(observers), controller,
        idempotency if idempotency is not None else MemoryIdempotencyStore(time.monotonic),
        caching if caching is not None else ResultCaching(None, CacheRule(False)),
        tracer=telemetry.start_trace if telemetry is not None else None,
        captures_content=(telemetry.settings.captures_content if telemetry is not None
                          else lambda _tenant: False),
        in_flight=in_flight, idempotency_lease_s=server.idempotency_lease_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Everything loaded at start-up (config, classifier, price tables) lives as long as the
        # process: keep it out of the garbage collector's scans, whose pauses hit the tail.
        gc.collect()
        gc.freeze()
        # A request's garbage is freed by reference counting; the young generation's scans (five
        # a second at 200 req/s with the default threshold of 700, 0.26 ms each) mostly walk
        # the live objects of requests in flight. A threshold far above what requests in flight
        # hold makes those scans rare; cycles (tracebacks, tasks) are still collected.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        asyncio.get_running_loop().set_exception_handler(loop_error_event)
        if telemetry is not None:
            telemetry.bind_loop(asyncio.get_running_loop())
        refresher = asyncio.create_task(_run_refresher(store))
        slo_refresher = asyncio.create_task(slo.run_refresher())
        guard = asyncio.create_task(trials.guard()) if trials.active else None
        start = getattr(store, "start", None)
        if start is not None:
            start()
        try:
            yield
        finally:
            for task in (refresher, slo_refresher, guard):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            stop = getattr(store, "stop", None)
            if stop is not None:
                await stop()
            for provider in providers.values():
                await provider.aclose()
            if telemetry is not None:
                telemetry.shutdown()

    async def slo_state(_: Request) -> Response:
        # Built on the loop, whose counts it reads; written out on a worker thread (its ~250 KB
        # of JSON at 803 series took 4-5 ms of the loop's time on the slow VM of 2026-12-07).
        snapshot = slo.snapshot()
        body = await asyncio.to_thread(lambda: orjson.dumps(snapshot.model_dump(mode="json")))
        return Response(body, media_type="application/json")

    # No redirect to the path without a trailing slash: a client would send its POST again
    # (`router.api.unrouted` answers such a path 404, as OpenAI does).
    app = FastAPI(title="slorouter", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None, redirect_slashes=False)
    # Served by the front door; registered so that other methods get 405 (OPTIONS 204), not 404.
    app.add_route("/v1/chat/completions", chat.handle, methods=["POST"])
    app.add_route("/v1/route/explain", explain_endpoint(pipeline, chat.bodies), methods=["POST"])
    app.add_route("/v1/models", models_endpoint(config), methods=["GET"])
    app.add_route("/v1/models/{model:path}", model_endpoint(config), methods=["GET"])
    app.add_route("/v1/slo", slo_state, methods=["GET"])
    app.add_route("/v1/feedback", feedback_endpoint(trials, config), methods=["POST"])
    app.add_route("/v1/experiments", experiments_endpoint(trials, config), methods=["GET"])
    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/v1/health/deployments",
                  deployments_health(breakers, store.load, config.deployments), methods=["GET"])
    app.add_route("/readyz", readyz_endpoint([*checks, stats_check(store),
                                              deployments_check(breakers)], config.version,
                                             config.config_version),
                  methods=["GET"])
    endpoint = telemetry.metrics_endpoint if telemetry is not None else None
    if endpoint is not None:
        app.add_route("/metrics", endpoint, methods=["GET"])
    app.add_exception_handler(HTTPException, http_error)
    return FrontDoor(app, chat.handle, keyless=not config.auth_required)


async def _run_refresher(store: StatsStore) -> None:
    run = getattr(store, "run_refresher", None)
    if run is not None:
        await run()
