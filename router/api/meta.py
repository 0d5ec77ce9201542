"""Small endpoints: `GET /v1/models`, `/healthz` (process up), `/readyz` (can serve), and
`/v1/health/deployments` (circuit breakers)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.execution.breaker import BreakerRegistry
from router.runtime_config import RuntimeConfig

ReadinessCheck = Callable[[], Awaitable[tuple[str, bool, str]]]

_STARTED = int(time.time())


def models_endpoint(config: RuntimeConfig) -> Callable[[Request], Awaitable[Response]]:
    names = sorted(config.aliases) + sorted(config.models)
    body = orjson.dumps({"object": "list", "data": [
        {"id": name, "object": "model", "created": _STARTED, "owned_by": "slorouter"}
        for name in names]})

    async def list_models(_: Request) -> Response:
        return Response(body, media_type="application/json")

    return list_models


async def healthz(_: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


def readyz_endpoint(checks: Sequence[ReadinessCheck],
                    policy_version: str) -> Callable[[Request], Awaitable[Response]]:
    async def readyz(_: Request) -> Response:
        results = [await check() for check in checks]
        ready = all(ok for _, ok, _ in results)
        body = {"status": "ready" if ready else "not_ready", "policy_version": policy_version,
                "checks": {name: {"ok": ok, "detail": detail} for name, ok, detail in results}}
        return Response(orjson.dumps(body), status_code=200 if ready else 503,
                        media_type="application/json")

    return readyz


def deployments_health(breakers: BreakerRegistry) -> Callable[[Request], Awaitable[Response]]:
    """`GET /v1/health/deployments`: every deployment's circuit breaker state."""

    async def health(_: Request) -> Response:
        return Response(breakers.snapshot().model_dump_json(), media_type="application/json")

    return health
