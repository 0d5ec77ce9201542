"""Small endpoints: `GET /v1/models` and `/v1/models/{model}`, `/healthz` (process up),
`/readyz` (can serve), and `/v1/health/deployments` (circuit breakers, attempts in flight).

`/readyz` is 503 only when this replica cannot serve; a part the replicas share that fails
(a Redis down, slow, or refusing writes) is `degraded`: still 200, since every replica would
fail the same check and a load balancer would take them all out, but listed (`degraded`) for
operators and alerts. Its checks run at once, so it answers as soon as the slowest has, and a
Redis check ends within its budget (`router.readiness_redis`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.api.errors import error_response
from router.api.unrouted import unknown_url
from router.decide import unknown_model
from router.execution.breaker import BreakerRegistry
from router.runtime_config import RuntimeConfig


@dataclass(frozen=True, slots=True)
class Readiness:
    """One check of `/readyz`: `ok` False makes the replica not ready (503); `degraded`: it
    serves, with something missing that `detail` names (and what that costs). A check with
    figures to read (the statistics store's) gives them as `status`, an object."""

    name: str
    ok: bool
    detail: str
    degraded: bool = False
    status: Mapping[str, Any] | None = None


ReadinessCheck = Callable[[], Awaitable[Readiness]]

_STARTED = int(time.time())


def _model(name: str) -> dict[str, str | int]:
    return {"id": name, "object": "model", "created": _STARTED, "owned_by": "slorouter"}


def models_endpoint(config: RuntimeConfig) -> Callable[[Request], Awaitable[Response]]:
    names = sorted(config.aliases) + sorted(config.models)
    body = orjson.dumps({"object": "list", "data": [_model(name) for name in names]})

    async def list_models(_: Request) -> Response:
        return Response(body, media_type="application/json")

    return list_models


def model_endpoint(config: RuntimeConfig) -> Callable[[Request], Awaitable[Response]]:
    """`GET /v1/models/{model}`: the model object of a name this router serves (an alias or a
    configured model, as listed by `/v1/models`), else 404 `model_not_found` (`unknown_url` for
    `/v1/models/`, which names none)."""
    bodies = {name: orjson.dumps(_model(name)) for name in [*config.aliases, *config.models]}

    async def retrieve_model(request: Request) -> Response:
        name = str(request.path_params["model"])
        body = bodies.get(name)
        if body is None:
            return error_response(unknown_model(name) if name else
                                  unknown_url(request.method, request.url.path))
        return Response(body, media_type="application/json")

    return retrieve_model


async def healthz(_: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


def _check_body(result: Readiness) -> dict[str, Any]:
    body: dict[str, Any] = {"ok": result.ok, "detail": result.detail,
                            "degraded": result.degraded}
    if result.status is not None:
        body["status"] = result.status
    return body


def readyz_endpoint(checks: Sequence[ReadinessCheck], policy_version: str,
                    config_version: str | None = None
                    ) -> Callable[[Request], Awaitable[Response]]:
    async def readyz(_: Request) -> Response:
        # At once, not one after another: each Redis check waits on a round trip, and in turn
        # they added up past a probe's timeout (`router.readiness_redis`).
        results = await asyncio.gather(*(check() for check in checks))
        ready = all(result.ok for result in results)
        body: dict[str, Any] = {
            "status": "ready" if ready else "not_ready", "policy_version": policy_version,
                "degraded": [result.name for result in results if result.degraded],
                "checks": {result.name: _check_body(result) for result in results}}
        if config_version is not None:  # every setting: replicas of two configs tell apart
            body["config_version"] = config_version
        return Response(orjson.dumps(body), status_code=200 if ready else 503,
                        media_type="application/json")

    return readyz


def deployments_health(breakers: BreakerRegistry, in_flight: Mapping[str, int],
                       deployments: Iterable[str]) -> Callable[[Request], Awaitable[Response]]:
    """`GET /v1/health/deployments`: every deployment's circuit breaker state, and under
    `in_flight` each configured deployment's upstream attempts in flight (the count its
    `max_in_flight` bulkhead caps)."""
    names = sorted(deployments)
    for name in names:  # listed from the start (closed), not once traffic first reaches them
        breakers.get(name)

    async def health(_: Request) -> Response:
        body = breakers.snapshot().model_dump(mode="json")
        body["in_flight"] = {name: in_flight.get(name, 0) for name in names}
        return Response(orjson.dumps(body), media_type="application/json")

    return health
