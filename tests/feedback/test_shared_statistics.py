"""Two router replicas share what they learn through a real redis-server (issue 5, item 5).

A and B (TTFT 200 / 400 ms, equal price) serve `chat` behind two replicas of the service with
the same `server.stats.redis_url`. Both warm up on their own traffic (A fast). Then A's TTFT
goes to 2 s and only the *learner* replica gets traffic; the *prober* replica receives no chat
request until it is asked, through `POST /v1/route/explain` (no provider call, so it cannot
learn from its own attempts) and then with live traffic, where it would send `chat`. Last, the
redis-server is killed: both replicas keep serving on their local views and say so in
`/readyz` and in their logs. The Redis server is this module's own, so killing it is safe.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.feedback.conftest import StartRouter, StartSim
from tests.feedback.scenarios import (
    Dep,
    ReplicaPlan,
    ReplicaRun,
    Slo,
    StatsKnobs,
    TaskRoute,
    chat_body,
    open_loop,
    profile,
    router_yaml,
    run_async,
    share,
    shared_learning,
    stats_status,
    timeline,
)
from tests.support.procs import ManagedProcess
from tests.support.redis_server import start_redis
from tests.support.services import Running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

A, B = Dep("dep-a", "model-a"), Dep("dep-b", "model-b")
PLAN = ReplicaPlan()
MAJORITY = 0.8  # of explained decisions (exploration may put the other one first)
ROUTED_AWAY = 0.9  # of the prober's live requests
FALLBACK_WITHIN_S = 10.0  # sync every 1 s, Redis operations time out after 2 s
AFTER_LOSS = 10  # requests per replica once Redis is gone


@dataclass
class Cluster:
    redis: ManagedProcess
    sim: Running
    learner: Running
    prober: Running
    shared_before: tuple[dict[str, Any], dict[str, Any]]  # /readyz stats of each, at start


@pytest.fixture(scope="module")
def cluster(module_dir: Path, stack: ExitStack, start_sim: StartSim,
            start_gateway: StartRouter) -> Cluster:
    redis_dir = module_dir / "redis"
    redis_dir.mkdir()
    redis = start_redis(redis_dir)
    stack.callback(redis.stop)
    sim = start_sim({A.sim_model: profile(200), B.sim_model: profile(400)})
    redis_url = f"redis://127.0.0.1:{redis.port}/0"
    # The prober does not explore: its first request after A slowed must be the ranking's
    # choice from what the learner shared, not a 3% exploration probe of the stale A.
    configs = {name: router_yaml(sim.base_url, [A, B],
                                 TaskRoute((A.name, B.name), Slo(ttft_p95_ms=1000)),
                                 stats=StatsKnobs(half_life_s=5.0, explore_share=share_,
                                                  redis_url=redis_url))
               for name, share_ in (("learner", 0.03), ("prober", 0.0))}
    with ThreadPoolExecutor(2) as pool:
        learner, prober = pool.map(lambda name: start_gateway(name, configs[name]),
                                   ["learner", "prober"])
    deadline = time.monotonic() + FALLBACK_WITHIN_S
    while True:  # until both have pushed and pulled at least once
        statuses = (stats_status(learner.base_url), stats_status(prober.base_url))
        if all(s["replicas_seen"] >= 1 for s in statuses) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return Cluster(redis, sim, learner, prober, statuses)


@pytest.fixture(scope="module")
def learned(cluster: Cluster) -> tuple[ReplicaRun, str]:
    """The shared-learning run, once; returns it with its printed form."""
    run = run_async(shared_learning(cluster.learner.base_url, cluster.prober.base_url,
                                    cluster.sim.base_url, A.sim_model, PLAN))
    text = (f"learner, from A's slowdown:\n{timeline(run.learner, [A.name, B.name])}\n"
            f"prober explains before: {run.explain_before}\n"
            f"prober explains at +{PLAN.probe_at_s:g} s: {run.explain_after}\n"
            f"prober's live traffic from +{PLAN.probe_at_s:g} s:\n"
            f"{timeline(run.probe, [A.name, B.name])}")
    print(f"\nshared statistics\n{text}")
    return run, text


def test_replicas_find_each_other_through_redis(cluster: Cluster) -> None:
    """With `server.stats.redis_url`, each replica reports a healthy shared store in `/readyz`
    and sees the other replica."""
    for status in cluster.shared_before:
        assert status["backend"] == "redis" and status["healthy"] is True, status
        assert status["detail"] == "shared" and status["replicas_seen"] >= 1, status


def test_idle_replica_routes_away_from_what_another_learned(
        cluster: Cluster, learned: tuple[ReplicaRun, str]) -> None:
    """The prober chose A while A was fast; after only the learner saw A slow down, the prober
    (no chat request of its own in between) chooses B, and its live traffic goes to B."""
    run, text = learned
    assert run.explain_before.count(A.name) >= MAJORITY * PLAN.explain_n, text
    assert run.explain_after.count(B.name) >= MAJORITY * PLAN.explain_n, text
    assert run.probe.shots and run.probe.shots[0].deployment == B.name, text
    assert share(run.probe.shots, B.name) >= ROUTED_AWAY, text
    assert all(s.ok for s in run.probe.shots), text


def test_redis_loss_falls_back_to_local_views(cluster: Cluster,
                                              learned: tuple[ReplicaRun, str]) -> None:
    """With the redis-server killed, within 10 s each replica reports `local fallback` in
    `/readyz` (still ready, no remote replica in its view), logs `stats.redis.unavailable`,
    and keeps answering every request."""
    assert learned[0].probe.shots, "the shared-learning run must come first"
    cluster.redis.kill()
    replicas = (cluster.learner, cluster.prober)
    deadline = time.monotonic() + FALLBACK_WITHIN_S
    statuses = [stats_status(r.base_url) for r in replicas]
    while any(s["healthy"] for s in statuses) and time.monotonic() < deadline:
        time.sleep(0.2)
        statuses = [stats_status(r.base_url) for r in replicas]
    for status in statuses:
        assert status["healthy"] is False, status
        assert status["detail"].startswith("local fallback"), status
        assert status["replicas_seen"] == 0, status
        assert status["check_ok"] is True and status["ready"] == "ready", status
    for replica in replicas:
        run = run_async(open_loop(replica.base_url, 5.0, AFTER_LOSS / 5.0,
                                  lambda i: (chat_body(salt=i), "short")))
        assert len(run.shots) == AFTER_LOSS and all(s.ok for s in run.shots), (
            timeline(run, [A.name, B.name]))
        assert "stats.redis.unavailable" in replica.proc.log_text(), replica.proc.log_text()
