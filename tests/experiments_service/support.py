"""Helpers of the experiment acceptance tests against the real service.

What lives here: simulator profiles, the router configuration (deployments, per-task policies
and the `experiments:` section) as YAML text, an async client that sends streamed `auto`
requests and reads what the client sees (status, `x-slorouter-arm`, `x-slorouter-model`,
request id, TTFT), and readers of `GET /v1/experiments` and `POST /v1/feedback`. What does not:
assertions and the numbers of a particular scenario (the tests hold them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson

from tests.support.sse_reading import StreamRead, read_stream

API_KEY = "sk-experiments-tenant"
TENANT_ENV = {"EXPERIMENTS_TENANT_KEY": API_KEY}
AUTH = {"authorization": f"Bearer {API_KEY}"}
T = TypeVar("T")


def profile(ttft_p50_ms: float, *, ttft_spread: float = 1.5, tokens: int = 6,
            tpot_ms: float = 1.0, **changes: object) -> dict[str, object]:
    """A simulator profile: lognormal TTFT with p99 = `ttft_spread` x p50, `tokens` output
    tokens at a steady TPOT, plus `changes` (e.g. `error_rate_500`)."""
    return {"ttft_p50_ms": ttft_p50_ms, "ttft_p99_ms": ttft_p50_ms * ttft_spread,
            "tpot_p50_ms": tpot_ms, "tpot_p99_ms": tpot_ms, "output_tokens_p50": tokens,
            "output_tokens_p99": tokens, "output_tokens_max": tokens, **changes}


def deployments_yaml(sim_base: str, names: Iterable[str]) -> tuple[str, str]:
    """`deployments:` and `models:` entries: one pass-through deployment and logical model per
    simulator model, same name."""
    deployments, models = [], []
    for name in names:
        deployments.append(
            f"\n  - name: {name}\n    model: openai/{name}\n    adapter: openai_passthrough\n"
            f"    api_base: {sim_base}/v1\n    input_price_per_mtok: 1.0\n"
            f"    output_price_per_mtok: 2.0\n    timeout_s: 10")
        models.append(f"\n  - name: {name}\n    deployments: [{name}]")
    return "".join(deployments), "".join(models)


ISOLATED_ERRORS = """
  reliability:
    max_retries_per_deployment: 0
    breaker:
      consecutive_failures: 1000000
      min_volume: 1000000"""


def router_yaml(sim_base: str, models: Sequence[str], default_candidates: Sequence[str],
                task_candidates: Mapping[str, Sequence[str]], experiments_yaml: str,
                experiments_redis_url: str | None = None, isolate_errors: bool = True) -> str:
    """A `slorouter serve` config: the `auto` alias routed by per-task policies, no result
    cache, one tenant key, and the given `experiments:` section. With `isolate_errors`, no
    retries and a breaker that never opens (an arm's upstream errors reach its outcomes
    unchanged); without, the default reliability settings."""
    deployments, logical = deployments_yaml(sim_base, models)
    reliability = ISOLATED_ERRORS if isolate_errors else ""
    tasks = "".join(f"\n    {task}:\n      candidates: [{', '.join(c)}]"
                    for task, c in task_candidates.items())
    shared = (f"\n  experiments_redis_url: {experiments_redis_url}"
              if experiments_redis_url is not None else "")
    return f"""version: 1
deployments:{deployments}
models:{logical}
routes:
  aliases: [auto]
  default_model: {default_candidates[0]}
api_keys:
  - key: env:EXPERIMENTS_TENANT_KEY
    tenant: experiments
    scopes: [read, slorouter:operator]  # GET /v1/experiments needs it
server:
  request_timeout_s: 20
  cache:
    backend: none{reliability}{shared}
policies:
  default:
    candidates: [{', '.join(default_candidates)}]
  tasks:{tasks if tasks else ' {}'}
experiments:
{experiments_yaml}"""


# --------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Seen:
    """What the client saw for one streamed request."""

    request_id: str
    status: int
    arm: str | None  # the arm name from `x-slorouter-arm: <experiment>/<arm>`
    experiment: str | None
    model: str | None  # `x-slorouter-model`
    ttft_s: float | None
    clean: bool  # 200, content, `[DONE]` and no error event
    degraded_arm: str | None = None  # `x-slorouter-arm-degraded: <experiment>/<arm>`


def client(base_url: str) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    return httpx.AsyncClient(base_url=base_url, timeout=30.0, limits=limits)


def chat_body(text: str, *, user: str | None = None,
              metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "auto", "stream": True, "max_tokens": 8,
                            "messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return body


async def send(http: httpx.AsyncClient, task: str, request_id: str, *,
               user: str | None = None, session_header: str | None = None,
               metadata: Mapping[str, str] | None = None) -> Seen:
    """POST one streamed `auto` chat request with the task hint and an explicit request id."""
    headers = {**AUTH, "x-slorouter-task": task, "x-request-id": request_id}
    if session_header is not None:
        headers["x-slorouter-session"] = session_header
    body = chat_body(f"{task} request {request_id}: name three rivers.", user=user,
                     metadata=metadata)
    started = time.monotonic()
    read = StreamRead(None, False, False)
    async with http.stream("POST", "/v1/chat/completions", content=orjson.dumps(body),
                           headers=headers) as response:
        experiment, _, arm = response.headers.get("x-slorouter-arm", "").partition("/")
        degraded = response.headers.get("x-slorouter-arm-degraded")
        model = response.headers.get("x-slorouter-model")
        if response.status_code == 200:
            read = await read_stream(response, started)
        else:
            await response.aread()
    return Seen(request_id, response.status_code, arm or None, experiment or None, model,
                read.ttft_s, response.status_code == 200 and read.done and not read.failed
                and read.ttft_s is not None,
                degraded)


async def gather_limited(calls: Sequence[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Run `calls` with at most `concurrency` in flight; results in call order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


# --------------------------------------------------------------------------------- reading


async def report(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """The experiment's report from `GET /v1/experiments?name=`."""
    response = await http.get("/v1/experiments", params={"name": name}, headers=AUTH)
    response.raise_for_status()
    data: list[dict[str, Any]] = response.json()["data"]
    assert [r["name"] for r in data] == [name]
    return data[0]


def arm_of(rep: Mapping[str, Any], arm: str) -> dict[str, Any]:
    found: dict[str, Any] = next(a for a in rep["arms"] if a["name"] == arm)
    return found


def metric_count(rep: Mapping[str, Any], arm: str, metric: str) -> int:
    return int(next(m["count"] for m in arm_of(rep, arm)["metrics"] if m["name"] == metric))


def requests_by_arm(rep: Mapping[str, Any]) -> dict[str, int]:
    return {a["name"]: int(a["requests"]) for a in rep["arms"]}


async def wait_for_counts(http: httpx.AsyncClient, name: str, expected: Mapping[str, int],
                          timeout_s: float = 10.0) -> dict[str, Any]:
    """Poll the report until its per-arm request counts equal `expected` (outcomes are written
    by a task after the response, so a report read at once may lag by a few)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rep = await report(http, name)
        counts = requests_by_arm(rep)
        if counts == {**{a: 0 for a in counts}, **expected} or time.monotonic() > deadline:
            return rep
        await asyncio.sleep(0.1)


async def feedback(http: httpx.AsyncClient, request_id: str, metric: str,
                   value: object) -> httpx.Response:
    return await http.post("/v1/feedback", headers=AUTH,
                           json={"request_id": request_id, "metric": metric, "value": value})


async def feedback_when_exposed(http: httpx.AsyncClient, request_id: str, metric: str,
                                value: object, timeout_s: float = 2.0) -> httpx.Response:
    """`POST /v1/feedback`, retried while the request id is unknown (404) for `timeout_s`: for
    scenarios about something else, so that a late exposure write (tested on its own in
    test_feedback.py) does not decide them."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await feedback(http, request_id, metric, value)
        if response.status_code != 404 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.05)


async def sim_requests(sim_base: str, model: str) -> int:
    """Requests the simulator has received for `model` (counted where they arrive)."""
    async with httpx.AsyncClient(timeout=10) as control:
        stats = (await control.get(f"{sim_base}/control/stats")).json()["models"]
    return int(stats[model]["requests"])


async def set_sim_profile(sim_base: str, model: str, changes: Mapping[str, object]) -> None:
    async with httpx.AsyncClient(timeout=10) as control:
        (await control.post(f"{sim_base}/control/models/{model}", json=dict(changes))
         ).raise_for_status()
