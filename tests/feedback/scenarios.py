"""Latency-feedback scenarios on the real service: profiles, configs, open-loop load, timelines.

Shared by the acceptance tests in `tests/feedback/` (light versions, asserted) and
`bench/latency_scenarios.py` (the same scenarios, printed as per-second timelines). Everything
talks to real processes over loopback: the router's OpenAI API (streamed, so the client measures
TTFT at the first content chunk and reads `x-slorouter-model` for the deployment that answered),
the simulator's `/control/models/{model}` (profile changes mid-run) and `/control/stats`
(upstream calls counted where they arrive, retries included), and the router's `/v1/slo` and
`/readyz`. No clock or network is faked.

What lives here: profile and YAML builders, an open-loop driver that fires scheduled events
(profile changes, killing Redis) at offsets and can stop early, timeline arithmetic (shares and
TTFT percentiles per window and per second) and its text rendering. What does not: assertions
(the tests hold them) and choice of numbers for a particular scenario beyond defaults.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from router.loadtest.loadgen import collector_paused
from tests.support.sse_reading import read_stream

API_KEY = "sk-feedback-tenant"
TENANT_ENV = {"FEEDBACK_TENANT_KEY": API_KEY}
CHARS_PER_TOKEN = 4  # the simulator's count, and the router's estimate of letters and spaces


# --------------------------------------------------------------------------------- profiles


def profile(ttft_p50_ms: float, *, ttft_spread: float = 1.5, prefill_ms_per_token: float = 0.0,
            tokens: int = 8, tpot_ms: float = 2.0, **changes: object) -> dict[str, object]:
    """A simulator profile: log-normal TTFT with p99 = `ttft_spread` x p50, a short answer of
    `tokens` tokens at a steady TPOT, optional prefill slope, plus `changes`."""
    return {"ttft_p50_ms": ttft_p50_ms, "ttft_p99_ms": ttft_p50_ms * ttft_spread,
            "prefill_ms_per_token": prefill_ms_per_token, "tpot_p50_ms": tpot_ms,
            "tpot_p99_ms": tpot_ms, "output_tokens_p50": tokens, "output_tokens_p99": tokens,
            "output_tokens_max": tokens, **changes}


def ttft_changes(ttft_p50_ms: float, ttft_spread: float = 1.5) -> dict[str, object]:
    """The profile fields that move a model's TTFT (for `POST /control/models/{model}`)."""
    return {"ttft_p50_ms": ttft_p50_ms, "ttft_p99_ms": ttft_p50_ms * ttft_spread}


# --------------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class Dep:
    """One deployment (and a logical model of the same name) calling one simulator model."""

    name: str
    sim_model: str
    price_in: float = 1.0
    price_out: float = 2.0
    timeout_s: float = 10.0

    def yaml(self, sim_base: str) -> str:
        return (f"\n  - name: {self.name}\n    model: openai/{self.sim_model}\n"
                f"    adapter: openai_passthrough\n    api_base: {sim_base}/v1\n"
                f"    input_price_per_mtok: {self.price_in}\n"
                f"    output_price_per_mtok: {self.price_out}\n"
                f"    connect_timeout_s: 2\n    timeout_s: {self.timeout_s}")


@dataclass(frozen=True)
class Slo:
    """A task's SLO block (milliseconds, as in the policy file)."""

    ttft_p95_ms: float | None = 1000.0
    tpot_p95_ms: float | None = None
    e2e_p99_ms: float | None = None
    availability: float = 0.99

    def yaml(self, indent: str) -> str:
        lines = [f"{indent}availability: {self.availability}"]
        for name in ("ttft_p95_ms", "tpot_p95_ms", "e2e_p99_ms"):
            value = getattr(self, name)
            if value is not None:
                lines.append(f"{indent}{name}: {value}")
        return "\n".join(lines)


@dataclass(frozen=True)
class TaskRoute:
    """One task's policy: candidates (logical model names), objective, SLO. No quality floor."""

    candidates: tuple[str, ...]
    slo: Slo = Slo()
    objective: str = "min_cost"

    def yaml(self, indent: str) -> str:
        return (f"{indent}candidates: [{', '.join(self.candidates)}]\n"
                f"{indent}objective: {self.objective}\n"
                f"{indent}slo:\n{self.slo.yaml(indent + '  ')}")


@dataclass(frozen=True)
class StatsKnobs:
    """`server.stats`: half-life of the decayed estimators, exploration share, shared store."""

    half_life_s: float = 5.0
    explore_share: float = 0.03
    redis_url: str | None = None

    def yaml(self) -> str:
        redis = f"\n    redis_url: {self.redis_url}" if self.redis_url else ""
        return (f"  stats:\n    half_life_s: {self.half_life_s}\n"
                f"    explore_share: {self.explore_share}{redis}")


def router_yaml(sim_base: str, deps: Sequence[Dep], default: TaskRoute,
                tasks: Mapping[str, TaskRoute] | None = None, stats: StatsKnobs = StatsKnobs(),
                request_timeout_s: float = 20.0) -> str:
    """A full `slorouter serve` config: one logical model per deployment, the `auto` alias
    routed by per-task policies (`default` for unlisted tasks), one tenant key, `server.stats`."""
    models = "".join(f"\n  - name: {d.name}\n    deployments: [{d.name}]" for d in deps)
    task_yaml = "".join(f"\n    {task}:\n{route.yaml('      ')}"
                        for task, route in (tasks or {}).items())
    return f"""version: 1
deployments:{''.join(d.yaml(sim_base) for d in deps)}
models:{models}
routes:
  aliases: [auto]
  default_model: {deps[0].name}
api_keys:
  - key: env:FEEDBACK_TENANT_KEY
    tenant: feedback
    scopes: [read]
server:
  max_body_bytes: 1048576
  request_timeout_s: {request_timeout_s}
  cache:
    backend: none
{stats.yaml()}
policies:
  default:
{default.yaml('    ')}
  tasks:{task_yaml if task_yaml else ' {}'}
"""


# --------------------------------------------------------------------------------- requests


def chat_body(prompt_tokens: int = 16, salt: int = 0) -> dict[str, Any]:
    """A streamed `auto` request whose one user message is about `prompt_tokens` tokens."""
    head = f"Request {salt}: name three rivers in one line. "
    filler = "lorem ipsum dolor sit amet " * max(0, (prompt_tokens * CHARS_PER_TOKEN
                                                    - len(head)) // 27 + 1)
    text = (head + filler)[: max(len(head), prompt_tokens * CHARS_PER_TOKEN)]
    return {"model": "auto", "stream": True, "max_tokens": 16,
            "messages": [{"role": "user", "content": text}]}


@dataclass(frozen=True)
class Shot:
    """What the client saw for one request (times relative to the run's origin)."""

    sent_s: float
    label: str
    status: int  # 0: transport error
    deployment: str | None
    ttft_s: float | None  # to the first content chunk
    e2e_s: float
    clean: bool  # 200 and `[DONE]` without an error event

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.clean


async def send(client: httpx.AsyncClient, body: Mapping[str, Any], task: str, label: str,
               origin: float) -> Shot:
    """POST one chat request and read it to the end: a stream (TTFT at its first content
    chunk), or a whole answer when `body` does not ask to stream (no TTFT: its E2E)."""
    started = time.monotonic()
    headers = {"authorization": f"Bearer {API_KEY}", "x-slorouter-task": task}
    if not body.get("stream"):
        return await _send_whole(client, body, headers, label, started, origin)
    try:
        async with client.stream("POST", "/v1/chat/completions", content=orjson.dumps(body),
                                 headers=headers) as response:
            deployment = response.headers.get("x-slorouter-model")
            if response.status_code != 200:
                await response.aread()
                return Shot(started - origin, label, response.status_code, deployment, None,
                            time.monotonic() - started, False)
            read = await read_stream(response, started)
            return Shot(started - origin, label, 200, deployment, read.ttft_s,
                        time.monotonic() - started, read.done and not read.failed)
    except httpx.HTTPError:
        return Shot(started - origin, label, 0, None, None, time.monotonic() - started, False)


async def _send_whole(client: httpx.AsyncClient, body: Mapping[str, Any],
                      headers: Mapping[str, str], label: str, started: float,
                      origin: float) -> Shot:
    try:
        response = await client.post("/v1/chat/completions", content=orjson.dumps(body),
                                     headers=headers)
    except httpx.HTTPError:
        return Shot(started - origin, label, 0, None, None, time.monotonic() - started, False)
    clean = response.status_code == 200 and bool(response.json().get("choices"))
    return Shot(started - origin, label, response.status_code,
                response.headers.get("x-slorouter-model"), None, time.monotonic() - started,
                clean)


def async_client(router_base: str, timeout_s: float = 30.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    return httpx.AsyncClient(base_url=router_base, timeout=timeout_s, limits=limits)


# --------------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Event:
    """Something to do at `at_s` seconds into the run (change a profile, kill Redis...)."""

    at_s: float
    name: str
    action: Callable[[], Awaitable[None]]


@dataclass
class Run:
    """The record of one open-loop run: every shot, when each event fired, upstream counts."""

    shots: list[Shot] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)  # name -> seconds into the run
    upstream: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    duration_s: float = 0.0


Request = Callable[[int], tuple[Mapping[str, Any], str]]  # i -> (body, label)
StopWhen = Callable[[Run, float], bool]


async def open_loop(router_base: str, rate: float, duration_s: float, make: Request,
                    task: str = "chat", events: Sequence[Event] = (),
                    stop_when: StopWhen | None = None, sim_base: str | None = None,
                    sample_period_s: float = 1.0) -> Run:
    """Send request `i` at `i / rate` seconds (a fixed open-loop schedule: arrivals do not wait
    for answers) until `duration_s` or until `stop_when(run, now_s)` holds (checked every
    `sample_period_s`); fire `events` at their offsets; with `sim_base`, sample the simulator's
    per-model request counters every `sample_period_s`. In-flight requests are awaited."""
    run = Run()
    async with async_client(router_base) as client, httpx.AsyncClient(timeout=10) as control:
        origin = time.monotonic()
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            body, label = make(i)
            run.shots.append(await send(client, body, task, label, origin))

        async def fire(event: Event) -> None:
            await asyncio.sleep(max(0.0, origin + event.at_s - time.monotonic()))
            run.events[event.name] = time.monotonic() - origin
            await event.action()

        async def sample() -> None:
            while True:
                now = time.monotonic() - origin
                if sim_base is not None:
                    body = (await control.get(f"{sim_base}/control/stats")).json()["models"]
                    run.upstream.append((now, {m: int(s["requests"]) for m, s in body.items()}))
                if stop_when is not None and stop_when(run, now):
                    return
                await asyncio.sleep(sample_period_s)

        firing = [asyncio.create_task(fire(e)) for e in events]
        sampler = asyncio.create_task(sample())
        i = 0
        while True:
            at = i / rate
            if at >= duration_s or sampler.done():
                break
            await asyncio.sleep(max(0.0, origin + at - time.monotonic()))
            task_ = asyncio.create_task(one(i))
            pending.add(task_)
            task_.add_done_callback(pending.discard)
            i += 1
        sampler.cancel()
        for f in firing:
            if not f.done():
                f.cancel()
        await asyncio.gather(sampler, *firing, return_exceptions=True)
        if pending:
            await asyncio.gather(*pending)
        run.duration_s = time.monotonic() - origin
        if sim_base is not None:
            body = (await control.get(f"{sim_base}/control/stats")).json()["models"]
            run.upstream.append((time.monotonic() - origin,
                                 {m: int(s["requests"]) for m, s in body.items()}))
    run.shots.sort(key=lambda s: s.sent_s)
    return run


async def post_json(url: str, body: Mapping[str, Any]) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        (await client.post(url, json=dict(body))).raise_for_status()


def set_profile(sim_base: str, model: str, changes: Mapping[str, object]) -> Callable[
        [], Awaitable[None]]:
    """An event action: `POST /control/models/{model}` with `changes`."""
    return lambda: post_json(f"{sim_base}/control/models/{model}", changes)


# --------------------------------------------------------------------------------- timelines


def window(shots: Sequence[Shot], start_s: float, end_s: float,
           label: str | None = None) -> list[Shot]:
    """Shots sent in [start_s, end_s), optionally with one label."""
    return [s for s in shots if start_s <= s.sent_s < end_s and (label is None or s.label == label)]


def share(shots: Sequence[Shot], deployment: str) -> float:
    """Share of the shots answered by `deployment` (NaN when there are none)."""
    if not shots:
        return float("nan")
    return sum(1 for s in shots if s.deployment == deployment) / len(shots)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def ttfts(shots: Sequence[Shot], deployment: str | None = None) -> list[float]:
    return [s.ttft_s for s in shots
            if s.ttft_s is not None and (deployment is None or s.deployment == deployment)]


def upstream_share(run: Run, model: str, start_s: float, end_s: float) -> float:
    """`model`'s share of all upstream calls the simulator received in [start_s, end_s)
    (nearest samples; retries and fallbacks count where they landed). NaN without samples."""
    inside = [(t, c) for t, c in run.upstream if start_s <= t <= end_s]
    if len(inside) < 2:
        return float("nan")
    (_, first), (_, last) = inside[0], inside[-1]
    total = sum(last.values()) - sum(first.values())
    return (last.get(model, 0) - first.get(model, 0)) / total if total else float("nan")


def first_time(shots: Sequence[Shot], after_s: float, predicate: Callable[[list[Shot]], bool],
               span_s: float = 2.0, until_s: float = math.inf) -> float | None:
    """The first second `t >= after_s` (in whole-second steps, seconds after `after_s`) from
    which every sliding window [t, t + span_s) up to `until_s` satisfies `predicate`; None if
    there is no such second."""
    end = min(until_s, max((s.sent_s for s in shots), default=after_s))
    starts = [after_s + k for k in range(int(max(0.0, end - after_s - span_s)) + 1)]
    good = [predicate(window(shots, t, t + span_s)) for t in starts]
    for k in range(len(starts)):
        if all(good[k:]):
            return starts[k] - after_s
    return None


def timeline(run: Run, deployments: Sequence[str], label: str | None = None) -> str:
    """Per second: requests sent, each deployment's share and client TTFT p50/p95, events."""
    head = f"{'t(s)':>5} {'n':>3} " + " ".join(
        f"{d[:10]:>10} {'p50ms':>6} {'p95ms':>6}" for d in deployments) + "  events"
    lines = [head]
    fired = sorted(run.events.items(), key=lambda kv: kv[1])
    last = int(max((s.sent_s for s in run.shots), default=0.0)) + 1
    for second in range(last):
        shots = window(run.shots, second, second + 1, label)
        if not shots:
            continue
        cells = []
        for d in deployments:
            values = ttfts(shots, d)
            cells.append(f"{share(shots, d):10.0%} {_ms(percentile(values, 50)):>6} "
                         f"{_ms(percentile(values, 95)):>6}")
        marks = ", ".join(name for name, at in fired if second <= at < second + 1)
        bad = sum(1 for s in shots if not s.ok)
        lines.append(f"{second:5d} {len(shots):3d} " + " ".join(cells)
                     + (f"  {marks}" if marks else "") + (f"  [{bad} failed]" if bad else ""))
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.0f}"


def run_async(coro: Awaitable[Any]) -> Any:
    """Run a coroutine from synchronous test or script code, with no garbage-collector pause
    in the latencies it measures (a full collection in a test process takes 150-270 ms here)."""
    async def wrapper() -> Any:
        return await coro

    with collector_paused():
        return asyncio.run(wrapper())


def joined(first: Run, second: Run) -> Run:
    """`second` appended after `first` on one time axis (second's times shifted)."""
    shift = first.duration_s
    return Run(
        shots=first.shots + [Shot(s.sent_s + shift, s.label, s.status, s.deployment, s.ttft_s,
                                  s.e2e_s, s.clean) for s in second.shots],
        events={**first.events, **{k: v + shift for k, v in second.events.items()}},
        upstream=first.upstream + [(t + shift, c) for t, c in second.upstream],
        duration_s=first.duration_s + second.duration_s)


# --------------------------------------------------------------------------------- scenarios

SLOWED, RECOVERED, FAILING = "A slowed", "A recovered", "A failing"


@dataclass(frozen=True)
class ShiftPlan:
    """The traffic-shift timeline: steady, A slowed, A recovered (until A holds the majority
    for `majority_hold_s` or `recover_max_s` passed), then A failing a share of requests."""

    rate: float = 20.0
    steady_s: float = 10.0
    slow_s: float = 20.0
    recover_max_s: float = 60.0
    majority_hold_s: float = 5.0
    fail_s: float = 15.0
    fast_ttft_ms: float = 200.0
    slow_ttft_ms: float = 2000.0
    fail_share: float = 0.5


async def traffic_shift(router_base: str, sim_base: str, model_a: str, deployment_a: str,
                        plan: ShiftPlan = ShiftPlan()) -> Run:
    """Open-loop `chat` traffic while A (simulator model `model_a`, routed as `deployment_a`)
    is slowed, recovers, then fails `fail_share` of its requests (HTTP 500)."""
    recover_at = plan.steady_s + plan.slow_s

    def majority_back(run: Run, now: float) -> bool:
        if now >= recover_at + plan.recover_max_s:
            return True
        if now < recover_at + plan.majority_hold_s + 2:
            return False
        recent = window(run.shots, now - plan.majority_hold_s - 2, now - 2)
        return bool(recent) and share(recent, deployment_a) > 0.5

    def short(i: int) -> tuple[Mapping[str, Any], str]:
        return chat_body(salt=i), "short"

    first = await open_loop(
        router_base, plan.rate, recover_at + plan.recover_max_s, short, sim_base=sim_base,
        stop_when=majority_back,
        events=[Event(plan.steady_s, SLOWED,
                      set_profile(sim_base, model_a, ttft_changes(plan.slow_ttft_ms))),
                Event(recover_at, RECOVERED,
                      set_profile(sim_base, model_a, ttft_changes(plan.fast_ttft_ms)))])
    second = await open_loop(
        router_base, plan.rate, plan.fail_s, short, sim_base=sim_base,
        events=[Event(0.0, FAILING,
                      set_profile(sim_base, model_a, {"error_rate_500": plan.fail_share}))])
    return joined(first, second)


@dataclass(frozen=True)
class PrefillPlan:
    """Short and long prompts: `short_only_s` of short prompts (a warm service), then every
    `long_every`-th request long; the first `long_burst` requests are long whatever the phase
    (a cold service hit by long prompts at once). Measured after `warmup_s` of the mix."""

    rate: float = 4.0
    short_only_s: float = 8.0
    long_burst: int = 0
    warmup_s: float = 8.0
    measure_s: float = 12.0
    short_tokens: int = 16
    long_tokens: int = 8000
    long_every: int = 2

    @property
    def measure_from_s(self) -> float:
        return self.short_only_s + self.warmup_s


async def long_and_short(router_base: str, plan: PrefillPlan = PrefillPlan(),
                         task: str = "chat") -> Run:
    """Open-loop requests labelled `long` (`long_tokens` prompt) or `short`, per `plan`; the
    events `mix` and `measure` mark the start of the mix and of the measured part."""

    def make(i: int) -> tuple[Mapping[str, Any], str]:
        mixed = i / plan.rate >= plan.short_only_s and i % plan.long_every == 0
        if i < plan.long_burst or mixed:
            return chat_body(plan.long_tokens, salt=i), "long"
        return chat_body(plan.short_tokens, salt=i), "short"

    async def nothing() -> None:
        return None

    return await open_loop(router_base, plan.rate, plan.measure_from_s + plan.measure_s, make,
                           task, events=[Event(plan.short_only_s, "mix", nothing),
                                         Event(plan.measure_from_s, "measure", nothing)])


# --------------------------------------------------------------------------------- replicas


async def explain_first(router_base: str, n: int, task: str = "chat") -> list[str]:
    """The first deployment of `n` routing decisions from `POST /v1/route/explain` (the same
    ranking as a real request, exploration included, without calling a provider)."""
    headers = {"authorization": f"Bearer {API_KEY}", "x-slorouter-task": task}
    out = []
    async with httpx.AsyncClient(base_url=router_base, timeout=10) as client:
        for i in range(n):
            response = await client.post("/v1/route/explain", json=chat_body(salt=i),
                                         headers=headers)
            response.raise_for_status()
            out.append(str(response.json()["choice"]["deployments"][0]))
    return out


def stats_status(router_base: str) -> dict[str, Any]:
    """The statistics store's status as `/readyz` reports it (its `stats` check)."""
    body = httpx.get(f"{router_base}/readyz", timeout=10).json()
    check = body["checks"]["stats"]
    status: dict[str, Any] = dict(check["status"])
    assert check["detail"] == f"{status['backend']}: {status['detail']}"  # a sentence, not JSON
    status["check_ok"], status["ready"] = check["ok"], body["status"]
    return status


@dataclass(frozen=True)
class ReplicaPlan:
    """Both replicas warm up on their own traffic; A slows; only the learner gets traffic until
    `probe_at_s`, when the other replica is asked to explain, then probed with live traffic."""

    warm_rate: float = 10.0
    warm_s: float = 6.0
    rate: float = 20.0
    slow_s: float = 20.0
    probe_at_s: float = 12.0
    probe_rate: float = 5.0
    probe_s: float = 6.0
    explain_n: int = 10
    slow_ttft_ms: float = 2000.0


@dataclass
class ReplicaRun:
    warm: tuple[Run, Run]
    explain_before: list[str]  # the prober's choices before A slowed
    learner: Run  # the learner's traffic from A's slowdown on
    explain_after: list[str]  # the prober's choices at `probe_at_s`, before its own traffic
    probe: Run  # the prober's live traffic from then on


async def shared_learning(learner_base: str, prober_base: str, sim_base: str, model_a: str,
                          plan: ReplicaPlan = ReplicaPlan()) -> ReplicaRun:
    """Two replicas sharing statistics: one learns that A slowed, the other is asked later."""

    def short(i: int) -> tuple[Mapping[str, Any], str]:
        return chat_body(salt=i), "short"

    warm = await asyncio.gather(*(open_loop(base, plan.warm_rate, plan.warm_s, short)
                                  for base in (learner_base, prober_base)))
    before = await explain_first(prober_base, plan.explain_n)

    async def probe() -> tuple[list[str], Run]:
        await asyncio.sleep(plan.probe_at_s)
        after = await explain_first(prober_base, plan.explain_n)
        return after, await open_loop(prober_base, plan.probe_rate, plan.probe_s, short)

    learner, (after, probed) = await asyncio.gather(
        open_loop(learner_base, plan.rate, plan.slow_s, short, events=[
            Event(0.0, SLOWED, set_profile(sim_base, model_a, ttft_changes(plan.slow_ttft_ms)))]),
        probe())
    return ReplicaRun((warm[0], warm[1]), before, learner, after, probed)
