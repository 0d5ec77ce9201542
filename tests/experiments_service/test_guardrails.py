"""Acceptance: an arm that breaks its error guardrail or its quality floor is halted in time.

Each scenario runs against the package's router in three phases: healthy traffic for 200 users
(each user's hashed arm is read from `x-slorouter-arm`); from an onset, the treatment arm
breaks (the simulator's `error_rate_500` on its model, or negative `thumbs_up` sent through
`POST /v1/feedback`) and traffic continues in paced batches until `GET /v1/experiments` shows a
halt; then every user is served once more. The arm's sample count at the onset comes from the
report, so "within the window" is counted in the guardrail's own values (outcomes for the error
rate, feedback values for the floor). The service checks guardrails every 2 s, so traffic is
paced to keep well under a window's worth of values per check.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import pytest

from tests.experiments_service.conftest import (
    ERROR_MAX_RATE,
    ERROR_WINDOW,
    QUALITY_FLOOR,
    QUALITY_WINDOW,
)
from tests.experiments_service.support import (
    Seen,
    arm_of,
    client,
    feedback_when_exposed,
    gather_limited,
    metric_count,
    report,
    send,
    set_sim_profile,
    sim_requests,
)
from tests.support.services import Running

pytestmark = pytest.mark.integration

USERS = [f"user-{i}" for i in range(200)]
BATCH = 20
CONCURRENCY = 4
RATE_PER_S = 40.0  # paced: about 40 of the arm's values per 2 s guardrail check
MAX_REQUESTS_AFTER_ONSET = 1000
HEALTHY_THUMBS, BROKEN_THUMBS = 0.9, 0.3

OnSeen = Callable[[httpx.AsyncClient, Seen, bool], Awaitable[None]]


@dataclass
class Scenario:
    """What one guardrail scenario observed."""

    first_arm: dict[str, str]  # user -> arm seen in the healthy phase
    onset_count: int  # the broken arm's guardrail values at the onset
    halt: dict[str, Any]
    after: dict[str, Seen]  # user -> what it saw after the halt
    report_before_after: dict[str, Any]  # read once the halt was seen, before `after`
    report_after: dict[str, Any]
    upstream_during_after: int  # the broken arm's model's requests while serving `after`
    requests_to_halt: int


async def _batch(http: httpx.AsyncClient, task: str, users: list[str], prefix: str,
                 on_seen: OnSeen, broken: bool) -> list[Seen]:
    async def one(user: str, i: int) -> Seen:
        seen = await send(http, task, f"{prefix}-{i}-{user}", user=user)
        await on_seen(http, seen, broken)
        return seen

    calls = [partial(one, user, i) for i, user in enumerate(users)]
    started = time.monotonic()
    seen = await gather_limited(calls, CONCURRENCY)
    await asyncio.sleep(max(0.0, len(users) / RATE_PER_S - (time.monotonic() - started)))
    return seen


async def _scenario(gateway: Running, sim: Running, *, task: str, experiment: str, arm: str,
                    model: str, count_of: Callable[[dict[str, Any]], int],
                    break_arm: Callable[[], Awaitable[None]], on_seen: OnSeen) -> Scenario:
    async with client(gateway.base_url) as http:
        healthy = await _batch(http, task, USERS, f"{experiment}-healthy", on_seen, False)
        first_arm = {u: s.arm or "?" for u, s in zip(USERS, healthy, strict=True)}
        await asyncio.sleep(0.3)  # outcome records are written just after each response
        onset = count_of(await report(http, experiment))
        await break_arm()
        rep, sent = await report(http, experiment), 0
        while not _persisted(rep) and sent < MAX_REQUESTS_AFTER_ONSET:
            users = [USERS[(sent + k) % len(USERS)] for k in range(BATCH)]
            await _batch(http, task, users, f"{experiment}-broken-{sent}", on_seen, True)
            sent += BATCH
            rep = await report(http, experiment)
        assert _persisted(rep), f"{arm} not halted after {sent} requests: {arm_of(rep, arm)}"
        await asyncio.sleep(0.3)
        report_before_after = await report(http, experiment)
        upstream_before = await sim_requests(sim.base_url, model)
        after = await _batch(http, task, USERS, f"{experiment}-after", on_seen, True)
        upstream_after = await sim_requests(sim.base_url, model)
        await asyncio.sleep(0.3)
        report_after = await report(http, experiment)
    return Scenario(first_arm, onset, _persisted(rep)[0], dict(zip(USERS, after, strict=True)),
                    report_before_after, report_after, upstream_after - upstream_before, sent)


def _persisted(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """Halts the guardrail loop has stored (the report also shows pending ones it computed)."""
    return [h for h in rep["halts"] if h["persisted"]]


async def _no_feedback(_http: httpx.AsyncClient, _seen: Seen, _broken: bool) -> None:
    return None


@pytest.fixture(scope="module")
def error_scenario(gateway: Running, sim: Running) -> Scenario:
    """The `errors` experiment: `flaky` answers 500 to half its requests from the onset."""
    return asyncio.run(_scenario(
        gateway, sim, task="summarization", experiment="errors", arm="flaky", model="flaky",
        count_of=lambda rep: int(arm_of(rep, "flaky")["requests"]),
        break_arm=partial(set_sim_profile, sim.base_url, "flaky", {"error_rate_500": 0.5}),
        on_seen=_no_feedback))


@pytest.fixture(scope="module")
def quality_scenario(gateway: Running, sim: Running) -> Scenario:
    """The `quality` experiment: users rate `meh` down (30% thumbs up) from the onset."""
    rng = random.Random(7)

    async def rate(http: httpx.AsyncClient, seen: Seen, broken: bool) -> None:
        p = BROKEN_THUMBS if broken and seen.arm == "meh" else HEALTHY_THUMBS
        response = await feedback_when_exposed(http, seen.request_id, "thumbs_up",
                                               float(rng.random() < p))
        assert response.status_code == 200, response.text

    async def no_change() -> None:
        return None

    return asyncio.run(_scenario(
        gateway, sim, task="extraction", experiment="quality", arm="meh", model="meh",
        count_of=lambda rep: metric_count(rep, "meh", "thumbs_up"), break_arm=no_change,
        on_seen=rate))


def test_error_guardrail_halts_the_arm_within_its_window(error_scenario: Scenario) -> None:
    """With 50% upstream 500s, `flaky` is halted on error_rate within `window` outcomes."""
    s = error_scenario
    after_onset = s.halt["at_sample"] - s.onset_count
    print(f"\nerrors: halted at outcome {s.halt['at_sample']}, {after_onset} after the onset "
          f"(window {ERROR_WINDOW}), {s.requests_to_halt} requests sent; {s.halt['reason']}")
    assert s.halt["arm"] == "flaky" and s.halt["guardrail"] == "error_rate"
    assert s.halt["persisted"]
    assert s.halt["observed"] > ERROR_MAX_RATE
    assert 0 < after_onset <= ERROR_WINDOW


def test_error_halted_arm_units_are_served_by_control_afterwards(error_scenario: Scenario) -> None:
    """After the halt, `flaky`'s users see `errors/control`, get steady answers, and `flaky`'s
    model receives nothing."""
    s = error_scenario
    moved = [u for u, arm in s.first_arm.items() if arm == "flaky"]
    assert len(moved) > 50  # about half of 200 users
    assert {s.after[u].arm for u in moved} == {"control"}
    assert all(s.after[u].model == "steady" and s.after[u].clean for u in moved)
    assert s.upstream_during_after == 0
    assert arm_of(s.report_after, "flaky")["halted"]
    assert arm_of(s.report_after, "flaky")["requests"] == \
        arm_of(s.report_before_after, "flaky")["requests"]
    assert not arm_of(s.report_after, "control")["halted"]


def test_quality_floor_halts_the_arm_within_its_window(quality_scenario: Scenario) -> None:
    """With thumbs-up falling from 90% to 30%, `meh` is halted on its floor within `window`
    feedback values."""
    s = quality_scenario
    after_onset = s.halt["at_sample"] - s.onset_count
    print(f"\nquality: halted at feedback value {s.halt['at_sample']}, {after_onset} after the "
          f"onset (window {QUALITY_WINDOW}), {s.requests_to_halt} requests sent; "
          f"{s.halt['reason']}")
    assert s.halt["arm"] == "meh" and s.halt["guardrail"] == "quality_floor"
    assert s.halt["observed"] < QUALITY_FLOOR
    assert 0 < after_onset <= QUALITY_WINDOW


def test_quality_halted_arm_units_are_served_by_control_afterwards(
        quality_scenario: Scenario, sim: Running) -> None:
    """After the floor halt, `meh`'s users see `quality/control` and `meh` gets no traffic."""
    s = quality_scenario
    moved = [u for u, arm in s.first_arm.items() if arm == "meh"]
    assert len(moved) > 50
    assert {s.after[u].arm for u in moved} == {"control"}
    assert all(s.after[u].model == "steady" for u in moved)
    assert s.upstream_during_after == 0
    assert arm_of(s.report_after, "meh")["halted"]
    assert arm_of(s.report_after, "meh")["requests"] == \
        arm_of(s.report_before_after, "meh")["requests"]


def test_halts_are_logged_by_the_service(error_scenario: Scenario, quality_scenario: Scenario,
                                         gateway: Running) -> None:
    """Each halt is a named `experiment_arm_halted` log event naming experiment and arm."""
    assert error_scenario.halt and quality_scenario.halt
    assert gateway.proc.log_path is not None
    halted = [line for line in gateway.proc.log_path.read_text().splitlines()
              if "experiment_arm_halted" in line]
    assert any("flaky" in line and "errors" in line for line in halted), halted
    assert any("meh" in line and "quality" in line for line in halted), halted


def test_a_halt_is_no_sample_ratio_mismatch(error_scenario: Scenario) -> None:
    """The report's SRM check counts each user once on the arm it hashes to: after `flaky`'s
    halt its users are served by control, yet the units still split as hashed (the 200 users'
    arms from the healthy phase) and no mismatch is flagged."""
    srm = error_scenario.report_after["srm"]
    hashed = {arm: sum(a == arm for a in error_scenario.first_arm.values())
              for arm in ("control", "flaky")}
    print(f"\nsrm after the halt: {srm['units']}, p = {srm['p_value']:.3g}")
    assert srm["units"] == hashed and sum(hashed.values()) == len(USERS)
    assert srm["ready"] and not srm["mismatch"]
