"""When a wait is a stall (`router.pipeline.stall_after_s`): twice the task's target."""

from __future__ import annotations

import pytest

from policies.schema import SloSpec, TaskPolicy
from router.pipeline import stall_after_s


@pytest.mark.parametrize(("slo", "stream", "expected"), [
    (SloSpec(ttft_p95_ms=1500, e2e_p99_ms=30000), True, 3.0),    # a stream: its first token
    (SloSpec(ttft_p95_ms=1500, e2e_p99_ms=30000), False, 60.0),  # a whole answer: E2E
    (SloSpec(e2e_p99_ms=4000), True, 8.0),    # a stream with no TTFT target: the E2E one
    (SloSpec(ttft_p95_ms=1500), False, None),  # nothing bounds a whole answer
    (SloSpec(), True, None),
])
def test_the_stall_threshold_is_twice_the_target_the_wait_is_judged_by(
        slo: SloSpec, stream: bool, expected: float | None) -> None:
    assert stall_after_s(TaskPolicy(candidates=("m",), slo=slo), stream) == expected


def test_without_a_policy_there_is_no_stall_threshold() -> None:
    assert stall_after_s(None, True) is None and stall_after_s(None, False) is None
