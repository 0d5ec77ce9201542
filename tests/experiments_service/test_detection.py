"""Acceptance: an arm whose model has 20% lower TTFT is found, with the right sign, over HTTP.

The `ttft` experiment splits chat requests 50/50 by request id between control (the chat policy:
model `base`, TTFT median 120 ms, p99 3x) and `fast` (`model:fast`, median 96 ms). Requests go
in batches; after each batch `GET /v1/experiments?name=ttft` is read, as a person watching the
experiment would (continuous monitoring is what the mSPRT allows). TTFT is what the router
measured, so its own overhead is in both arms and dilutes the 20%.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from tests.experiments_service.conftest import FAST_RATIO
from tests.experiments_service.support import (
    Seen,
    arm_of,
    client,
    gather_limited,
    report,
    requests_by_arm,
    send,
    wait_for_counts,
)
from tests.support.services import Running

BATCH = 40
CONCURRENCY = 8
# Stated bounds (both arms together). bench/experiments_sim.py: the library simulation at log sd
# 0.47 detects in median 200, p95 380 requests; at this service 10 of 10 runs by 280.
DETECTION_BUDGET = 600
# The p50 bootstrap interval is a weaker test than the mSPRT on log TTFT (a median uses less of
# the sample). Alone it excluded 0 by 40-320 requests in 22 of 22 runs (2026-12-02, six of them
# with both cores kept busy); in two full-suite runs of 2026-12-02 it still covered 0 at 600
# (differences -7 and -9 ms, intervals ending at +1.6 and +0.2 ms). Its bound is stated apart.
P50_BUDGET = 1_200

pytestmark = pytest.mark.integration


def _primary(rep: dict[str, Any], arm: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in rep["sequential"]
                                 if s["arm"] == arm and s["metric"] == rep["primary_metric"])
    return found


def _comparison(rep: dict[str, Any], metric: str, statistic: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in rep["comparisons"]
                                 if (c["metric"], c["statistic"]) == (metric, statistic))
    return found


@dataclass
class Detection:
    """The run: what the client saw, and the report when each criterion was first met."""

    seen: list[Seen] = field(default_factory=list)
    # the arms' counts before the run: the package's gateway is shared, and a module run before
    # this one in the same worker (feedback, stickiness, the report CLI) sent `chat` requests
    before: Counter[str] = field(default_factory=Counter)
    at_sequential: dict[str, Any] | None = None  # the mSPRT rejected
    requests_at_sequential: int = 0
    at_bootstrap: dict[str, Any] | None = None  # the p50 bootstrap interval excluded 0
    requests_at_bootstrap: int = 0
    last: dict[str, Any] = field(default_factory=dict)


async def _run_until_detected(gateway: Running) -> Detection:
    """Batches until both the mSPRT has rejected and the p50 interval excludes 0 (or budget)."""
    run = Detection()
    async with client(gateway.base_url) as http:
        run.before = Counter(requests_by_arm(await report(http, "ttft")))
        while len(run.seen) < P50_BUDGET and (run.at_sequential is None
                                              or run.at_bootstrap is None):
            calls = [partial(send, http, "chat", f"ttft-{i}")
                     for i in range(len(run.seen), len(run.seen) + BATCH)]
            run.seen += await gather_limited(calls, CONCURRENCY)
            run.last = await wait_for_counts(
                http, "ttft", run.before + Counter(s.arm or "?" for s in run.seen))
            if run.at_sequential is None and _primary(run.last, "fast")["reject"]:
                run.at_sequential, run.requests_at_sequential = run.last, len(run.seen)
            if run.at_bootstrap is None and _comparison(run.last, "ttft_ms", "p50")["high"] < 0:
                run.at_bootstrap, run.requests_at_bootstrap = run.last, len(run.seen)
    return run


@pytest.fixture(scope="module")
def detected(gateway: Running) -> Detection:
    return asyncio.run(_run_until_detected(gateway))


def test_faster_arm_is_detected_with_right_sign_within_stated_requests(
        detected: Detection) -> None:
    """The mSPRT on TTFT rejects for `fast`, estimate < 0, sequence < 0, within the budget."""
    rep = detected.at_sequential
    assert rep is not None, f"not detected within {DETECTION_BUDGET} requests: {detected.last}"
    assert detected.requests_at_sequential <= DETECTION_BUDGET, detected.requests_at_sequential
    primary = _primary(rep, "fast")
    print(f"\nttft experiment: detected after {detected.requests_at_sequential} requests "
          f"(control {primary['n_control']}, fast {primary['n_arm']}); TTFT ratio "
          f"{math.exp(primary['estimate']):.3f} [{math.exp(primary['low']):.3f}, "
          f"{math.exp(primary['high']):.3f}], p={primary['p_value']:.4f}")
    assert primary["estimate"] < 0 and primary["high"] < 0
    assert math.exp(primary["low"]) < FAST_RATIO < 1.0  # the sequence covers a 20% cut
    assert rep["decided"] == ["fast"]
    assert min(primary["n_control"], primary["n_arm"]) >= 100  # min_sample respected


def test_bootstrap_p50_ttft_interval_excludes_zero_within_stated_requests(
        detected: Detection) -> None:
    """Within the budget the report's p50 TTFT difference (bootstrap) is negative and its
    interval excludes 0 (a fixed-time interval: at the mSPRT's rejection it may still cover 0)."""
    rep = detected.at_bootstrap
    assert rep is not None, f"p50 interval covers 0 after {P50_BUDGET}: {detected.last}"
    p50 = _comparison(rep, "ttft_ms", "p50")
    print(f"\nafter {detected.requests_at_bootstrap} requests p50 TTFT: control "
          f"{p50['control_value']:.1f} ms, fast {p50['arm_value']:.1f} ms, "
          f"diff {p50['difference']:+.1f} [{p50['low']:+.1f}, {p50['high']:+.1f}] ms")
    assert p50["arm"] == "fast"
    assert p50["difference"] < 0 and p50["high"] < 0 and p50["excludes_zero"]
    assert arm_of(rep, "fast")["ttft_p50_ms"] < arm_of(rep, "control")["ttft_p50_ms"]


def test_each_arm_is_served_by_its_route_and_counted_as_the_header_says(
        detected: Detection) -> None:
    """`x-slorouter-arm` names the arm, the arm's model answered, and the report counts agree."""
    seen, rep = detected.seen, detected.last
    assert all(s.clean and s.experiment == "ttft" for s in seen)
    served = {(s.arm, s.model) for s in seen}
    assert served == {("control", "base"), ("fast", "fast")}
    by_header = Counter(s.arm for s in seen)
    assert Counter(requests_by_arm(rep)) - detected.before == by_header
    # unit `request` at 50/50: the split is a fair coin per request id
    assert abs(by_header["fast"] - len(seen) / 2) <= 4 * math.sqrt(len(seen) / 4)
