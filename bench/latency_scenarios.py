"""Latency-feedback scenarios on the real service, printed as per-second timelines (issue 5).

Starts the provider simulator, `slorouter serve` (and, for `replicas`, a redis-server and a
second replica) as real processes on loopback, drives open-loop streamed `chat` traffic and
prints, per second, each deployment's share of the requests sent and their client-measured
TTFT p50/p95, then a summary line per acceptance item. Scenarios (the same code the tests in
`tests/feedback/` assert on, see `tests/feedback/scenarios.py`):

- `shift`: A (TTFT p50 200 ms) vs B (400 ms), equal price, 20 req/s: steady; A's TTFT raised to
  2 s; A restored (until A holds the majority or 60 s); A failing 50% of its requests.
- `prefill`: `cheap` (0.3 ms/token prefill) vs `long` (0.02 ms/token, pricier), SLO TTFT p95
  <= 1 s: 8 s of short prompts, then 8k-token prompts interleaved with short ones;
  `prefill-cold`: the same on a fresh router whose first sixteen requests are 8k tokens long.
- `slo`: a task whose TTFT target (100 ms) no candidate meets: `GET /v1/slo` after the traffic.
- `replicas`: two replicas sharing statistics through Redis; one learns A slowed, the other
  is asked; then Redis is killed and `/readyz` is read.

Run: `nice .venv/bin/python -m bench.latency_scenarios [--scenario shift] [--half-life 5]`.
Note the machine load (printed at start and end): on a busy box TTFTs include scheduler delay.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.feedback.scenarios import (
    FAILING,
    RECOVERED,
    SLOWED,
    TENANT_ENV,
    Dep,
    PrefillPlan,
    ReplicaPlan,
    Run,
    ShiftPlan,
    Slo,
    StatsKnobs,
    TaskRoute,
    chat_body,
    first_time,
    long_and_short,
    open_loop,
    percentile,
    profile,
    router_yaml,
    share,
    shared_learning,
    stats_status,
    timeline,
    traffic_shift,
    ttfts,
    upstream_share,
    window,
)
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router, start_simulator

A, B = Dep("dep-a", "model-a"), Dep("dep-b", "model-b")
CHEAP = Dep("cheap", "model-cheap", price_in=0.5, price_out=1.0)
LONG = Dep("long", "model-long", price_in=2.0, price_out=4.0)
WINDOW_REQUESTS = 20  # the shift's summary judges shares over windows this many requests long


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


class Services:
    """Processes started for one scenario, stopped when it ends."""

    def __init__(self, directory: Path, exits: ExitStack) -> None:
        self.dir, self.exits = directory, exits

    def sim(self, models: dict[str, dict[str, object]]) -> Running:
        running = start_simulator(self.dir, models)
        self.exits.callback(running.stop)
        return running

    def router(self, name: str, config: str) -> Running:
        running = start_router(self.dir, config, env=TENANT_ENV, name=name)
        self.exits.callback(running.stop)
        return running


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"


def shift(services: Services, stats: StatsKnobs, plan: ShiftPlan) -> None:
    sim = services.sim({A.sim_model: profile(plan.fast_ttft_ms), B.sim_model: profile(400)})
    gateway = services.router("shift", router_yaml(
        sim.base_url, [A, B], TaskRoute((A.name, B.name), Slo(ttft_p95_ms=1000)), stats=stats))
    run: Run = asyncio.run(traffic_shift(gateway.base_url, sim.base_url, A.sim_model, A.name,
                                         plan))
    slowed, recovered, failing = (run.events[k] for k in (SLOWED, RECOVERED, FAILING))
    print(f"\n== shift: open loop {plan.rate:g} req/s, {stats}\n{timeline(run, [A.name, B.name])}")
    # Windows of at least 20 requests: in 2 s at a few requests a second, one exploration
    # probe (3% of requests) is 12-50% of a window and hides when the traffic moved.
    span = max(2.0, WINDOW_REQUESTS / plan.rate)
    moved = first_time(run.shots, slowed, lambda w: share(w, B.name) >= 0.9, span_s=span,
                       until_s=recovered)
    back = first_time(run.shots, recovered, lambda w: share(w, A.name) > 0.5, span_s=span,
                      until_s=failing)
    lost = first_time(run.shots, failing, lambda w: share(w, A.name) <= 0.1, span_s=span)
    steady = window(run.shots, 0.0, slowed)
    print(f"A's share while faster: {share(steady, A.name):.3f} "
          f"(TTFT p50 A {percentile(ttfts(steady, A.name), 50) * 1e3:.0f} ms)")
    print(f"after A slowed: B >= 90% ({span:g} s windows, sustained) from +{_s(moved)}; B's "
          f"share in "
          f"[+15 s, recovery): {share(window(run.shots, slowed + 15, recovered), B.name):.3f}")
    print(f"after A recovered: A holds the majority from +{_s(back)}")
    print(f"after A started failing: A answers <= 10% from +{_s(lost)}; A's share of upstream "
          f"calls in [+10 s, end): {upstream_share(run, A.sim_model, failing + 10, 1e9):.3f}")
    ok = sum(1 for s in run.shots if s.ok)
    print(f"requests: {len(run.shots)}, clean answers {ok} ({ok / len(run.shots):.2%})")


def prefill(services: Services, stats: StatsKnobs, plan: PrefillPlan, name: str) -> None:
    sim = services.sim({CHEAP.sim_model: profile(150, prefill_ms_per_token=0.3),
                        LONG.sim_model: profile(250, prefill_ms_per_token=0.02)})
    gateway = services.router("prefill", router_yaml(
        sim.base_url, [CHEAP, LONG], TaskRoute((CHEAP.name, LONG.name), Slo(ttft_p95_ms=1000)),
        stats=stats))
    run: Run = asyncio.run(long_and_short(gateway.base_url, plan))
    print(f"\n== {name}: {plan.short_only_s:g} s of short prompts, then {plan.long_tokens}-token "
          f"prompts every {plan.long_every} (first {plan.long_burst} long), {plan.rate:g} req/s, "
          f"{stats}")
    start = run.events["measure"]
    for label, want in (("long", LONG.name), ("short", CHEAP.name)):
        print(f"{label} prompts:\n{timeline(run, [CHEAP.name, LONG.name], label)}")
        measured = window(run.shots, start, run.duration_s, label)
        print(f"{label} prompts after the {start:.0f} s warm-up: {share(measured, want):.3f} to "
              f"{want} (n={len(measured)}); client TTFT p50/p95 "
              f"{percentile(ttfts(measured), 50) * 1e3:.0f}/"
              f"{percentile(ttfts(measured), 95) * 1e3:.0f} ms")
    body = httpx.get(f"{gateway.base_url}/v1/slo", timeout=10).json()
    chat = next(t for t in body["tasks"] if t["task"] == "chat")
    print("chat demotions: " + "; ".join(f"{d['deployment']} penalty {d['penalty']:.2f}"
                                         for d in chat["deployments"]))


def slo(services: Services, stats: StatsKnobs, requests: int) -> None:
    sim = services.sim({CHEAP.sim_model: profile(150), LONG.sim_model: profile(250)})
    route = TaskRoute((CHEAP.name, LONG.name), Slo(ttft_p95_ms=100, availability=0.99))
    gateway = services.router("slo", router_yaml(sim.base_url, [CHEAP, LONG], route,
                                                 {"summarization": route}, stats=stats))
    run: Run = asyncio.run(open_loop(gateway.base_url, 8.0, requests / 8.0,
                                     lambda i: (chat_body(salt=i), "short"),
                                     task="summarization"))
    ok = sum(1 for s in run.shots if s.ok)
    print(f"\n== slo: summarization, target TTFT p95 <= 100 ms, {requests} requests at 8 req/s: "
          f"{ok} answered, {share(run.shots, CHEAP.name):.2f} by {CHEAP.name}, client TTFT p50 "
          f"{percentile(ttfts(run.shots), 50) * 1e3:.0f} ms")
    body = httpx.get(f"{gateway.base_url}/v1/slo", timeout=10).json()
    task = next(t for t in body["tasks"] if t["task"] == "summarization")
    for state in task["windows"]:
        for sli in state["slis"]:
            print(f"  window {state['window_s']:>6.0f} s  {sli['sli']:<12} total {sli['total']:4d}"
                  f"  bad {sli['bad']:4d}  attainment {sli['attainment']:.3f}"
                  f"  objective {sli['objective']:.3f}  met {sli['met']}"
                  f"  burn {sli['burn_rate']:.1f}")
    print(f"  burn alerts: {task['burn_alerts']}")


def replicas(services: Services, stats: StatsKnobs, plan: ReplicaPlan) -> None:
    redis = start_redis(services.dir)
    services.exits.callback(redis.stop)
    sim = services.sim({A.sim_model: profile(200), B.sim_model: profile(400)})
    shared = StatsKnobs(stats.half_life_s, stats.explore_share,
                        f"redis://127.0.0.1:{redis.port}/0")
    config = router_yaml(sim.base_url, [A, B], TaskRoute((A.name, B.name), Slo(ttft_p95_ms=1000)),
                         stats=shared)
    with ThreadPoolExecutor(2) as pool:
        learner, prober = pool.map(lambda name: services.router(name, config),
                                   ["learner", "prober"])
    time.sleep(2.5)  # two sync rounds
    run = asyncio.run(shared_learning(learner.base_url, prober.base_url, sim.base_url,
                                      A.sim_model, plan))
    print(f"\n== replicas: {shared}\nlearner from A's slowdown:\n"
          f"{timeline(run.learner, [A.name, B.name])}\n"
          f"prober explains before: {run.explain_before.count(A.name)}/{plan.explain_n} to A; "
          f"at +{plan.probe_at_s:g} s (no request of its own since): "
          f"{run.explain_after.count(B.name)}/{plan.explain_n} to B\nprober live traffic:\n"
          f"{timeline(run.probe, [A.name, B.name])}")
    killed = time.monotonic()
    redis.kill()
    for _ in range(100):
        statuses = [stats_status(r.base_url) for r in (learner, prober)]
        if not any(s["healthy"] for s in statuses):
            break
        time.sleep(0.1)
    print(f"Redis killed: both in local fallback after {time.monotonic() - killed:.1f} s: "
          f"{[(s['detail'], s['replicas_seen'], s['ready']) for s in statuses]}")


SCENARIOS: dict[str, Callable[[Services, StatsKnobs, argparse.Namespace], None]] = {
    "shift": lambda s, k, a: shift(s, k, ShiftPlan(rate=a.rate)),
    "prefill": lambda s, k, a: prefill(s, k, PrefillPlan(), "prefill, warm service"),
    "prefill-cold": lambda s, k, a: prefill(
        s, k, PrefillPlan(short_only_s=0.0, long_burst=16, warmup_s=6.0, measure_s=12.0),
        "prefill, cold service"),
    "slo": lambda s, k, a: slo(s, k, 40),
    "replicas": lambda s, k, a: replicas(s, k, ReplicaPlan()),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--half-life", type=float, default=5.0, help="server.stats.half_life_s")
    parser.add_argument("--explore-share", type=float, default=0.03)
    parser.add_argument("--rate", type=float, default=20.0, help="req/s of the shift scenario")
    args = parser.parse_args()
    stats = StatsKnobs(half_life_s=args.half_life, explore_share=args.explore_share)
    print(f"start: {load()}")
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"latency-{name}-") as tmp, ExitStack() as exits:
            SCENARIOS[name](Services(Path(tmp), exits), stats, args)
        print(f"after {name}: {load()}")


if __name__ == "__main__":
    main()
