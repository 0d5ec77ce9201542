"""Backoff: full jitter under the cap, never before Retry-After, never past the deadline."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.execution.backoff import (
    BackoffPolicy,
    ceiling,
    full_jitter,
    parse_retry_after,
    retry_after_from_headers,
    retry_delay,
)

policies = st.builds(
    BackoffPolicy,
    base_s=st.floats(0, 5),
    cap_s=st.floats(0, 60),
    multiplier=st.floats(1, 10),
)


@given(policy=policies, attempt=st.integers(0, 10_000), seed=st.integers(0, 2**32))
def test_jitter_never_exceeds_the_cap(policy: BackoffPolicy, attempt: int, seed: int) -> None:
    """A full-jitter delay lies in [0, min(cap, base * multiplier ** attempt)]."""
    delay = full_jitter(policy, attempt, random.Random(seed))
    assert 0.0 <= delay <= ceiling(policy, attempt) <= policy.cap_s


@given(
    policy=policies,
    attempt=st.integers(0, 50),
    seed=st.integers(0, 2**32),
    retry_after=st.one_of(st.none(), st.floats(0, 120)),
    remaining=st.floats(0, 300),
)
def test_retry_never_precedes_retry_after_nor_outlives_deadline(
    policy: BackoffPolicy, attempt: int, seed: int, retry_after: float | None, remaining: float
) -> None:
    """A retry delay is at least Retry-After and shorter than the remaining deadline, else None."""
    delay = retry_delay(
        policy, attempt, random.Random(seed), retry_after_s=retry_after, remaining_s=remaining
    )
    if retry_after is not None and retry_after >= remaining:
        assert delay is None
    if delay is not None:
        assert delay < remaining
        assert retry_after is None or delay >= retry_after
        assert delay <= max(policy.cap_s, retry_after if retry_after is not None else 0.0)


def test_window_grows_exponentially_until_the_cap() -> None:
    """The jitter window doubles per attempt and then stays at the cap."""
    policy = BackoffPolicy(base_s=0.1, cap_s=1.0, multiplier=2.0)
    windows = [ceiling(policy, n) for n in range(6)]
    assert windows == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_retry_after_as_seconds_and_http_date() -> None:
    """Retry-After parses both delta-seconds and an HTTP date relative to the given now."""
    now = 1_700_000_000.0
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now) == pytest.approx(10.0)
    assert parse_retry_after("whenever", now) is None
    assert parse_retry_after("-3", now) is None


def test_retry_after_ms_header_wins() -> None:
    """`retry-after-ms` (finer) is preferred to `retry-after`."""
    headers = {"retry-after-ms": "1500", "retry-after": "9"}
    assert retry_after_from_headers(headers, 0.0) == pytest.approx(1.5)
    assert retry_after_from_headers({"retry-after": "9"}, 0.0) == 9.0
    assert retry_after_from_headers({}, 0.0) is None
