"""Acceptance: sticky assignment across two replicas and a restart; shares; shared outcomes.

Two routers (`r1`, `r2`) run the same config with `server.experiments_redis_url` set to a real
redis-server. The same users are sent to `r1`, then `r2`, then, after `r1` is stopped and a
fresh process started on the same config (`r1b`), to it. Each user's arm is read from
`x-slorouter-arm`. The `sticky-split` experiment (chat, unit user) splits 50/30/20; the
`sticky-sessions` experiment (translation, unit session) takes the session from the
`x-slorouter-session` header or from `metadata.session_id`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest

from tests.experiments_service.support import (
    TENANT_ENV,
    Seen,
    client,
    feedback_when_exposed,
    gather_limited,
    requests_by_arm,
    router_yaml,
    send,
    wait_for_counts,
)
from tests.support.procs import ManagedProcess
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

USERS = [f"sticky-user-{i}" for i in range(400)]
SESSIONS = [f"session-{i}" for i in range(100)]
SHARES = {"control": 0.5, "b": 0.3, "c": 0.2}
ARM_MODEL = {"control": "instant-a", "b": "instant-b", "c": "instant-c"}
CONCURRENCY = 8
SPLIT_P_MIN = 0.001  # per-arm two-sided binomial test; 3 arms, so a false alarm is rare

EXPERIMENTS_YAML = f"""  - name: sticky-split
    tasks: [chat]
    unit: user
    salt: sticky-1
    arms:
      - {{name: control, route: "policy:default", control: true, share: {SHARES['control']}}}
      - {{name: b, route: "model:instant-b", share: {SHARES['b']}}}
      - {{name: c, route: "model:instant-c", share: {SHARES['c']}}}
    metrics:
      - {{name: thumbs_up, kind: binary}}
  - name: sticky-sessions
    tasks: [translation]
    unit: session
    salt: sticky-1
    arms:
      - {{name: control, route: "model:instant-a", control: true, share: 0.5}}
      - {{name: b, route: "model:instant-b", share: 0.5}}
"""


@dataclass
class Observed:
    """What the clients saw on each replica, and the reports read along the way."""

    r1: dict[str, Seen] = field(default_factory=dict)
    r2: dict[str, Seen] = field(default_factory=dict)
    r1b: dict[str, Seen] = field(default_factory=dict)
    report_r1: dict[str, Any] = field(default_factory=dict)  # after r1 and r2 served all users
    report_r2: dict[str, Any] = field(default_factory=dict)
    report_r1b: dict[str, Any] = field(default_factory=dict)  # after the restart served them
    feedback_across: dict[str, Any] = field(default_factory=dict)  # r2's request, r1's endpoint
    feedback_across_arm: str | None = None
    sessions_header: dict[str, Seen] = field(default_factory=dict)
    sessions_metadata: dict[str, Seen] = field(default_factory=dict)
    no_unit: list[Seen] = field(default_factory=list)


async def _users(running: Running, tag: str) -> dict[str, Seen]:
    async with client(running.base_url) as http:
        calls = [partial(send, http, "chat", f"{tag}-{user}", user=user) for user in USERS]
        return dict(zip(USERS, await gather_limited(calls, CONCURRENCY), strict=True))


async def _split_report(running: Running, expected: Counter[str]) -> dict[str, Any]:
    async with client(running.base_url) as http:
        return await wait_for_counts(http, "sticky-split", expected)


async def _feedback_across(r1: Running, served: Seen) -> dict[str, Any]:
    async with client(r1.base_url) as http:
        response = await feedback_when_exposed(http, served.request_id, "thumbs_up", 1)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _sessions(r2: Running, r1b: Running, obs: Observed) -> None:
    async with client(r2.base_url) as h2, client(r1b.base_url) as h1:
        header = [partial(send, h2, "translation", f"sess-h-{s}", session_header=s)
                  for s in SESSIONS]
        meta = [partial(send, h1, "translation", f"sess-m-{s}", metadata={"session_id": s})
                for s in SESSIONS]
        obs.sessions_header = dict(zip(SESSIONS, await gather_limited(header, CONCURRENCY),
                                       strict=True))
        obs.sessions_metadata = dict(zip(SESSIONS, await gather_limited(meta, CONCURRENCY),
                                         strict=True))
        obs.no_unit = [await send(h1, "translation", "sess-none"),
                       await send(h1, "chat", "user-none")]


@pytest.fixture(scope="module")
def observed(sim: Running, redis_server: ManagedProcess,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory: Path = tmp_path_factory.mktemp("sticky")
    config = router_yaml(sim.base_url, ["instant-a", "instant-b", "instant-c"], ["instant-a"],
                         {}, EXPERIMENTS_YAML,
                         experiments_redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    obs = Observed()
    r1 = start_router(directory, config, env=TENANT_ENV, name="r1")
    r2 = start_router(directory, config, env=TENANT_ENV, name="r2")
    try:
        obs.r1 = asyncio.run(_users(r1, "r1"))
        obs.r2 = asyncio.run(_users(r2, "r2"))
        both = Counter(s.arm or "?" for s in [*obs.r1.values(), *obs.r2.values()])
        obs.report_r1 = asyncio.run(_split_report(r1, both))
        obs.report_r2 = asyncio.run(_split_report(r2, both))
        served_by_r2 = obs.r2[USERS[0]]
        obs.feedback_across = asyncio.run(_feedback_across(r1, served_by_r2))
        obs.feedback_across_arm = served_by_r2.arm
        r1.stop()
        r1b = start_router(directory, config, env=TENANT_ENV, name="r1b")
        try:
            obs.r1b = asyncio.run(_users(r1b, "r1b"))
            all_three = both + Counter(s.arm or "?" for s in obs.r1b.values())
            obs.report_r1b = asyncio.run(_split_report(r1b, all_three))
            asyncio.run(_sessions(r2, r1b, obs))
        finally:
            r1b.stop()
    finally:
        r1.stop()
        r2.stop()
    yield obs


def test_every_request_is_answered_by_its_arms_model(observed: Observed) -> None:
    """All answers are clean, and each arm's requests went to that arm's model."""
    for seen in [*observed.r1.values(), *observed.r2.values(), *observed.r1b.values()]:
        assert seen.clean and seen.experiment == "sticky-split"
        assert seen.model == ARM_MODEL[seen.arm or "?"]


def test_assignment_is_sticky_across_two_replicas(observed: Observed) -> None:
    """Every user gets the same arm from both replicas."""
    differ = [u for u in USERS if observed.r1[u].arm != observed.r2[u].arm]
    assert differ == []


def test_assignment_is_sticky_across_a_restart(observed: Observed) -> None:
    """A fresh process on the same config puts every user in the arm it had before."""
    differ = [u for u in USERS if observed.r1[u].arm != observed.r1b[u].arm]
    assert differ == []


@pytest.mark.parametrize("arm", list(SHARES))
def test_split_matches_configured_share_within_sampling_error(observed: Observed,
                                                              arm: str) -> None:
    """Over 400 users each arm's count passes a two-sided binomial test at its share."""
    count = sum(1 for u in USERS if observed.r1[u].arm == arm)
    result = binomtest(count, len(USERS), SHARES[arm])
    print(f"\n{arm}: {count}/{len(USERS)} users = {count / len(USERS):.3f} "
          f"(share {SHARES[arm]}), binomial p = {result.pvalue:.3f}")
    assert result.pvalue > SPLIT_P_MIN


def test_outcomes_are_shared_between_replicas_through_redis(observed: Observed) -> None:
    """Both replicas report the outcomes of both: per-arm counts equal the headers seen."""
    seen = Counter(s.arm for s in [*observed.r1.values(), *observed.r2.values()])
    assert requests_by_arm(observed.report_r1) == dict(seen)
    assert requests_by_arm(observed.report_r2) == dict(seen)


def test_outcomes_survive_a_replica_restart_in_redis(observed: Observed) -> None:
    """The restarted replica's report holds the outcomes from before the restart too."""
    seen = Counter(s.arm for s in [*observed.r1.values(), *observed.r2.values(),
                                   *observed.r1b.values()])
    assert requests_by_arm(observed.report_r1b) == dict(seen)


def test_feedback_for_a_request_served_by_another_replica_is_accepted(
        observed: Observed) -> None:
    """Feedback posted to r1 for a request r2 served is recorded for r2's arm."""
    assert observed.feedback_across["recorded"] is True
    assert observed.feedback_across["experiment"] == "sticky-split"
    assert observed.feedback_across["arm"] == observed.feedback_across_arm


def test_session_unit_is_sticky_whether_sent_as_header_or_metadata(observed: Observed) -> None:
    """A session id from `x-slorouter-session` (r2) or `metadata.session_id` (r1b) gets one
    arm; both arms are used."""
    header = {s: observed.sessions_header[s].arm for s in SESSIONS}
    metadata = {s: observed.sessions_metadata[s].arm for s in SESSIONS}
    assert header == metadata
    assert set(header.values()) == {"control", "b"}
    assert all(v.experiment == "sticky-sessions" for v in observed.sessions_header.values())


def test_request_without_the_unit_id_is_not_in_the_experiment(observed: Observed) -> None:
    """No session (unit session) or no `user` (unit user): served, with no arm header."""
    assert all(s.clean and s.arm is None and s.experiment is None for s in observed.no_unit)


def test_reports_agree_between_replicas(observed: Observed) -> None:
    """The same data gives both replicas the same per-arm TTFT p50 in their reports."""
    for arm in SHARES:
        r1 = next(a for a in observed.report_r1["arms"] if a["name"] == arm)
        r2 = next(a for a in observed.report_r2["arms"] if a["name"] == arm)
        assert r1["requests"] == r2["requests"]
        assert r1["ttft_p50_ms"] == pytest.approx(r2["ttft_p50_ms"])

