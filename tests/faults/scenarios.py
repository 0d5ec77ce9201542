"""Fault scenarios against the real service: simulator profiles, router configs, measurements.

Shared by the fault-matrix tests in `tests/faults/` (light versions) and `bench/chaos.py` (the
heavy versions, printed as one table). Everything here talks to real processes over loopback:
the router's OpenAI API, its `GET /v1/health/deployments`, the simulator's `/control/stats`
(upstream calls are counted where they arrive, not where the router says it sent them) and
`/proc/<pid>/status` for the router's resident memory. No clock or network is faked.

What lives here: the profiles and YAML builders, an open-loop load driver that keeps status,
E2E, `Retry-After` and stream endings per request, counters read from the simulator, a
breaker-state watcher and percentile helpers. What does not: assertions (the tests hold them)
and printing (the bench does).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson

from router.loadtest.loadgen import collector_paused
from tests.support.services import Running, start_router

T = TypeVar("T")
API_KEY = "sk-faults-tenant"
TENANT_ENV = {"FAULTS_TENANT_KEY": API_KEY, "SIM_KEY": "sim-key"}
MESSAGES = [{"role": "user", "content": "Name three rivers in one line."}]
CHAT_HEADERS = {"x-slorouter-task": "chat"}


def steady(ttft_ms: float, tokens: int = 8, tpot_ms: float = 1.0,
           **changes: object) -> dict[str, object]:
    """A simulator profile with constant TTFT, TPOT and length (p50 = p99), plus `changes`."""
    return {"ttft_p50_ms": ttft_ms, "ttft_p99_ms": ttft_ms, "tpot_p50_ms": tpot_ms,
            "tpot_p99_ms": tpot_ms, "output_tokens_p50": tokens, "output_tokens_p99": tokens,
            "output_tokens_max": tokens, **changes}


def heavy_tail(ttft_ms: float, share: float = 0.1, factor: float = 10.0,
               tokens: int = 8) -> dict[str, object]:
    """TTFT of `ttft_ms` (a little spread), and `share` of requests at `factor` times that."""
    return {**steady(ttft_ms, tokens), "ttft_p99_ms": ttft_ms * 1.3,
            "ttft_tail_share": share, "ttft_tail_p50_ms": ttft_ms * factor,
            "ttft_tail_max_ms": ttft_ms * factor * 1.2}


# --------------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class Dep:
    """One deployment in a router config: its name, the simulator model it calls, adapter."""

    name: str
    sim_model: str
    adapter: str = "openai_passthrough"
    timeout_s: float = 10.0
    price_in: float = 1.0
    price_out: float = 2.0
    max_in_flight: int | None = None

    def yaml(self, sim_base: str) -> str:
        key = "\n    api_key: env:SIM_KEY" if self.adapter == "litellm" else ""
        cap = f"\n    max_in_flight: {self.max_in_flight}" if self.max_in_flight else ""
        return (f"\n  - name: {self.name}\n    model: openai/{self.sim_model}\n"
                f"    adapter: {self.adapter}\n    api_base: {sim_base}/v1{key}\n"
                f"    input_price_per_mtok: {self.price_in}\n"
                f"    output_price_per_mtok: {self.price_out}\n"
                f"    connect_timeout_s: 2\n    timeout_s: {self.timeout_s}{cap}")


def interactive_pool(max_concurrency: int, max_queue: int, max_queue_wait_s: float) -> str:
    """The `reliability` block (as `router_yaml` takes it) of one interactive admission pool."""
    return (f"    interactive:\n      max_concurrency: {max_concurrency}\n"
            f"      max_queue: {max_queue}\n      max_queue_wait_s: {max_queue_wait_s}")


def router_yaml(sim_base: str, deps: Sequence[Dep], models: Mapping[str, Sequence[str]],
                reliability: str = "", policies: str = "",
                request_timeout_s: float = 20.0) -> str:
    """A full `slorouter serve` config: deployments, models (name → deployment order), one
    tenant key, `server.reliability` (an indented YAML block) and optional `policies:`."""
    default_model = next(iter(models))
    model_yaml = "".join(f"\n  - name: {name}\n    deployments: [{', '.join(order)}]"
                         for name, order in models.items())
    return f"""version: 1
deployments:{''.join(dep.yaml(sim_base) for dep in deps)}
models:{model_yaml}
routes:
  aliases: [auto]
  default_model: {default_model}
api_keys:
  - key: env:FAULTS_TENANT_KEY
    tenant: faults
    scopes: [read]
server:
  max_body_bytes: 65536
  request_timeout_s: {request_timeout_s}
  reliability:
{reliability}
{policies}"""


def start_with_second_tenant(directory: Path, config: str, tenant: str, key: str) -> Running:
    """A router on `config` (`router_yaml`'s, tenant `faults` on `API_KEY`) with a second
    tenant, `tenant`, on API key `key`: started in `directory`."""
    config = config.replace("api_keys:\n", "api_keys:\n  - key: env:SECOND_TENANT_KEY\n"
                            f"    tenant: {tenant}\n    scopes: [read]\n", 1)
    return start_router(directory, config, env={**TENANT_ENV, "SECOND_TENANT_KEY": key})


# --------------------------------------------------------------------------------- observing


class SimCounters:
    """Per-model counters from the simulator's `/control/stats` (upstream truth)."""

    def __init__(self, sim_base: str) -> None:
        self._url = f"{sim_base}/control/stats"

    def read(self) -> dict[str, dict[str, Any]]:
        models: dict[str, dict[str, Any]] = httpx.get(self._url, timeout=10).json()["models"]
        return models

    def value(self, model: str, counter: str = "requests") -> int:
        return int(self.read().get(model, {}).get(counter, 0))

    def snapshot(self, models: Sequence[str], counter: str = "requests") -> dict[str, int]:
        stats = self.read()
        return {m: int(stats.get(m, {}).get(counter, 0)) for m in models}


def breaker_states(router_base: str) -> dict[str, str]:
    """Deployment → breaker state, from `GET /v1/health/deployments`."""
    body = httpx.get(f"{router_base}/v1/health/deployments", timeout=10).json()
    return {d["deployment"]: d["state"] for d in body["deployments"]}


def attempts_in_flight(router_base: str) -> dict[str, int]:
    """Deployment → upstream attempts in flight (the bulkhead's count), from
    `GET /v1/health/deployments`."""
    body = httpx.get(f"{router_base}/v1/health/deployments", timeout=10).json()
    return {name: int(count) for name, count in body["in_flight"].items()}


class BreakerWatch:
    """Polls `/v1/health/deployments` in a thread and keeps every state change it saw, and each
    deployment's peak of upstream attempts in flight."""

    def __init__(self, router_base: str, period_s: float = 0.05) -> None:
        self._base = router_base
        self._period = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.changes: list[tuple[float, str, str]] = []  # (monotonic, deployment, new state)
        self._last: dict[str, str] = {}
        self.peak_in_flight: dict[str, int] = {}

    def __enter__(self) -> BreakerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                try:
                    body = client.get(f"{self._base}/v1/health/deployments").json()
                except httpx.HTTPError:
                    body = {"deployments": []}
                now = time.monotonic()
                for dep in body["deployments"]:
                    name, state = dep["deployment"], dep["state"]
                    if self._last.get(name, "closed") != state:
                        self.changes.append((now, name, state))
                    self._last[name] = state
                for name, count in body.get("in_flight", {}).items():
                    self.peak_in_flight[name] = max(self.peak_in_flight.get(name, 0), count)
                self._stop.wait(self._period)

    def transitions(self, deployment: str | None = None) -> list[str]:
        return [s for _, d, s in self.changes if deployment is None or d == deployment]


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc (kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by the nearest-rank method; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# --------------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Call:
    """One request to send: body and extra headers."""

    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Shot:
    """What the client saw for one request."""

    sent_at: float  # monotonic
    e2e_s: float
    status: int  # 0: transport error
    retry_after: str | None = None
    deployment: str | None = None
    error_code: str | None = None
    content_chunks: int = 0
    stream_done: bool = False  # `data: [DONE]` arrived
    stream_error: bool = False  # an error event arrived
    response_id: str | None = None  # the completion's `id` (a replay repeats it)

    @property
    def ok(self) -> bool:
        """A success the client can trust: 200, and for streams a clean end without error."""
        if self.status != 200:
            return False
        return not self.stream_error and (self.stream_done or self.content_chunks == 0)

    @property
    def truncated_success(self) -> bool:
        """A stream that ended without `[DONE]` and without an error: the silent failure."""
        return self.status == 200 and self.content_chunks > 0 and not (
            self.stream_done or self.stream_error)


def chat_body(model: str = "auto", stream: bool = False, **extra: object) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": stream, **extra}


def varied_body(model: str = "auto", stream: bool = False, **extra: object) -> dict[str, Any]:
    """A body with a prompt of its own: replicas of a model are chosen by a hash of the prompt
    prefix (prefix affinity), so varied prompts spread over them as real traffic does. The
    nonce is letters only: digit runs can look like personal data and raise the risk."""
    nonce = "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:12])
    prompt = f"Question {nonce}: name three rivers in one line."
    return chat_body(model, stream, messages=[{"role": "user", "content": prompt}], **extra)


@dataclass(frozen=True)
class TenantLoad:
    """One tenant's open-loop traffic: `rate` non-streamed requests a second to `model`, evenly
    spaced, for `seconds`, from `after_s` on."""

    tenant: str
    key: str
    model: str
    rate: float
    seconds: float
    after_s: float = 0.0


async def tenants_load(base_url: str, loads: Sequence[TenantLoad]) -> dict[str, Counter[str]]:
    """Run `loads` together: each tenant's answers counted by `ok` or status and error code."""
    results: dict[str, Counter[str]] = {load.tenant: Counter() for load in loads}
    async with httpx.AsyncClient(base_url=base_url, timeout=30,
                                 limits=httpx.Limits(max_connections=200)) as client:
        async def one(load: TenantLoad) -> None:
            response = await client.post(
                "/v1/chat/completions", json=varied_body(load.model),
                headers={"authorization": f"Bearer {load.key}", **CHAT_HEADERS})
            code = ("ok" if response.status_code == 200
                    else f"{response.status_code} {response.json()['error']['code']}")
            results[load.tenant][code] += 1

        async def run_load(load: TenantLoad) -> None:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(load.after_s)
            started, tasks = loop.time(), []
            for sent in range(round(load.rate * load.seconds)):
                await asyncio.sleep(max(0.0, started + sent / load.rate - loop.time()))
                tasks.append(asyncio.create_task(one(load)))
            await asyncio.gather(*tasks)

        await asyncio.gather(*(run_load(load) for load in loads))
    return results


async def send(client: httpx.AsyncClient, call: Call) -> Shot:
    """POST one chat request and read the whole answer (SSE parsed when it streams)."""
    started = time.monotonic()
    headers = {"authorization": f"Bearer {API_KEY}", **CHAT_HEADERS, **call.headers}
    content = orjson.dumps(call.body)
    try:
        async with client.stream("POST", "/v1/chat/completions", content=content,
                                 headers=headers) as response:
            if response.status_code != 200 or not call.body.get("stream"):
                raw = await response.aread()
                ok = response.status_code == 200
                return Shot(started, time.monotonic() - started, response.status_code,
                            response.headers.get("retry-after"),
                            response.headers.get("x-slorouter-model"),
                            None if ok else _error_code(raw),
                            response_id=_field(raw, "id") if ok else None)
            chunks, done, failed = await _read_sse(response)
            return Shot(started, time.monotonic() - started, 200, None,
                        response.headers.get("x-slorouter-model"), None, chunks, done, failed)
    except httpx.HTTPError as exc:
        return Shot(started, time.monotonic() - started, 0, error_code=type(exc).__name__)


async def _read_sse(response: httpx.Response) -> tuple[int, bool, bool]:
    chunks, done, failed = 0, False, False
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                done = True
                continue
            event = orjson.loads(payload)
            if "error" in event:
                failed = True
            elif any(c.get("delta", {}).get("content") for c in event.get("choices", [])):
                chunks += 1
    except httpx.HTTPError:
        failed = True  # the connection broke: the client sees an error, not a clean end
    return chunks, done, failed


def _error_code(raw: bytes) -> str | None:
    try:
        return str(orjson.loads(raw)["error"].get("code"))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None


def _field(raw: bytes, name: str) -> str | None:
    try:
        value = orjson.loads(raw).get(name)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return str(value) if value is not None else None


def async_client(router_base: str, timeout_s: float = 30.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    return httpx.AsyncClient(base_url=router_base, timeout=timeout_s, limits=limits)


async def open_loop(router_base: str, calls: Sequence[Call], rate: float,
                    seed: int = 7) -> list[Shot]:
    """Send `calls[i]` at the i-th arrival of a Poisson process at `rate` per second, each on
    its own task whatever earlier ones are doing (offered load does not wait for answers)."""
    rng = random.Random(seed)
    async with async_client(router_base) as client:
        origin = time.monotonic()
        at = 0.0
        tasks = []
        for call in calls:
            at += rng.expovariate(rate)
            delay = origin + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(client, call)))
        return list(await asyncio.gather(*tasks))


async def closed_loop(router_base: str, calls: Sequence[Call], concurrency: int) -> list[Shot]:
    """Send `calls` with at most `concurrency` in flight (each worker sends back to back)."""
    queue = list(reversed(calls))
    shots: list[Shot] = []
    async with async_client(router_base) as client:

        async def worker() -> None:
            while queue:
                shots.append(await send(client, queue.pop()))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return shots


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from synchronous test code, with no garbage-collector pause in the
    latencies it measures (a full collection in a test process takes 150-270 ms here)."""
    with collector_paused():
        return asyncio.run(coro)


def e2e(shots: Sequence[Shot], ok_only: bool = True) -> list[float]:
    return [s.e2e_s for s in shots if s.ok or not ok_only]


# --------------------------------------------------------------------------------- profiles

# Simulator models of the fault matrix (one process serves them all; each scenario has its
# own models so the simulator's per-model counters never mix scenarios).
FAULT_MODELS: dict[str, dict[str, object]] = {
    "fivexx-bad": steady(20, error_rate_500=0.3),
    "fivexx-good": steady(20),
    # replicas of one pinned model, one failing 30% until a test heals it
    "pinned-flaky": steady(20, error_rate_500=0.3),
    "pinned-steady": steady(20),
    "hang": steady(20, hang_rate=1.0),
    "hang-backup": steady(20),
    "limited": steady(20, error_rate_429=1.0, retry_after_s=2.0),
    "limited-backup": steady(20),
    "limited-solo": steady(20, error_rate_429=1.0, retry_after_s=1.0),
    "cut-abort": steady(20, 30, cut_rate=1.0, cut_after_chunks=3, cut_mode="abort"),
    "cut-eof": steady(20, 30, cut_rate=1.0, cut_after_chunks=3, cut_mode="eof"),
    "cut-backup": steady(20, 30),
    "act": steady(300),
    "act-drop": steady(20, cut_rate=1.0, cut_mode="abort"),  # takes the request, drops it
    # answers 200, then ends its stream cleanly before any content or finish reason
    "act-eof": steady(20, cut_rate=1.0, cut_after_chunks=0, cut_mode="eof"),
    "capacity": steady(400),
    "long": steady(2500),  # an answer duplicates wait for
    "replica-slow": steady(1500),  # two replicas of one model, one far over a 500 ms TTFT SLO
    "replica-fast": steady(50),
    "tail": heavy_tail(100),
    "calm": steady(100),
    # the bulkhead: a deployment that takes requests and never answers, beside healthy ones
    "bulk-hang": steady(20, hang_rate=1.0),
    # a hang that only clients' deadlines ever cut (test_client_deadline_stalls.py)
    "stall": steady(20, hang_rate=1.0),
    "stall-ok": steady(20),
    "bulk-ok": steady(20),
    "bulk-tail": heavy_tail(60, share=0.3),
    "bulk-cut": steady(20, 30, cut_rate=0.5, cut_after_chunks=3, cut_mode="abort"),
    "bulk-flaky": steady(20, error_rate_500=0.5),
    # a hedge that always loses: `bimodal`'s slow fifth (~300 ms) answers before a hedge sent
    # at 3x its median (150 ms) to `slowpoke` (400 ms) could
    "bimodal": heavy_tail(50, share=0.2, factor=6),
    "slowpoke": steady(400),
    # the retry budget's tenants: one whose prompts fail everywhere, one with transient 503s
    "poison-a": steady(20, error_rate_500=1.0),
    "poison-b": steady(20, error_rate_500=1.0),
    "blip": steady(20, error_rate_503=0.6),
    "blip-backup": steady(20),
}

# Policies of the hedging scenario (test and bench): `tail` first with `calm` as the hedge
# target; summarization never hedges; `action` asks for hedging, which must still not happen.
# The fault matrix's routes (tests/faults/test_fault_matrix.py, bench/chaos.py): `five-xx`
# and the cut-stream models are replicas of one pinned model (the ranking moves traffic off
# the faulty one); hangs and 429s go through a task's policy whose one candidate is the faulty
# model and whose fallback is the healthy one, where the breaker alone keeps traffic off the
# faulty deployment (what those scenarios measure).
MATRIX_POLICIES = """policies:
  default:
    candidates: [five-xx]
  tasks:
    action:
      candidates: [act]
      require_idempotency_key: true
    extraction:
      candidates: [hanging]
      fallbacks: [hanging-backup]
    classification:
      candidates: [throttled]
      fallbacks: [throttled-backup]
"""
HANGING = {"x-slorouter-task": "extraction"}  # `auto` to `hanging`, then `hanging-backup`
THROTTLED = {"x-slorouter-task": "classification"}  # `throttled`, then `throttled-backup`

HEDGE_POLICIES = """policies:
  default:
    candidates: [tail]
    fallbacks: [calm]
    hedging: true
  tasks:
    summarization:
      candidates: [tail]
      fallbacks: [calm]
      hedging: false
    action:
      candidates: [tail]
      fallbacks: [calm]
      hedging: true
      require_idempotency_key: true
"""
