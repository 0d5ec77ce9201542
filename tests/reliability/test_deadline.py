"""Deadlines: the shorter of policy and client wins; attempt timeouts never outlive it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.errors import RequestError
from router.execution.deadline import (
    SDK_READ_TIMEOUT_HEADER,
    SDK_TIMEOUT_HEADER,
    TIMEOUT_MS_HEADER,
    AttemptTimeoutPolicy,
    Deadline,
    head_timeout_s,
    requested_timeout_s,
)
from tests.reliability.fakes import FakeClock

POLICY_S = 30.0


def test_policy_default_applies_without_client_headers() -> None:
    """With no timeout header the policy's total is the deadline."""
    clock = FakeClock()
    deadline = Deadline.from_headers(clock, POLICY_S, {})
    assert deadline.total_s == POLICY_S
    assert deadline.remaining() == POLICY_S


def test_client_header_shortens_the_deadline() -> None:
    """`x-slorouter-timeout-ms` below the policy default shortens the deadline."""
    deadline = Deadline.from_headers(FakeClock(), POLICY_S, {TIMEOUT_MS_HEADER: "2500"})
    assert deadline.total_s == pytest.approx(2.5)


def test_client_header_never_lengthens_the_deadline() -> None:
    """A client asking for more than the policy allows gets the policy's total."""
    deadline = Deadline.from_headers(
        FakeClock(), POLICY_S, {TIMEOUT_MS_HEADER: str(POLICY_S * 10_000)}
    )
    assert deadline.total_s == POLICY_S


def test_shorter_of_our_header_and_sdk_header_wins() -> None:
    """Between `x-slorouter-timeout-ms` and the SDK's `x-stainless-timeout` the shorter wins
    (the SDK's less its headroom: 4 s is 3.6 s)."""
    headers = {TIMEOUT_MS_HEADER: "9000", SDK_TIMEOUT_HEADER: "4"}
    assert requested_timeout_s(headers) == pytest.approx(3.6)
    headers = {TIMEOUT_MS_HEADER: "3000", SDK_TIMEOUT_HEADER: "4"}
    assert requested_timeout_s(headers) == pytest.approx(3.0)


def test_the_python_sdks_read_timeout_bounds_a_whole_answer_but_no_stream() -> None:
    """openai-python sends its timeout as `x-stainless-read-timeout`: a non-streamed answer
    (whose head comes with it) is bounded by it; a stream, which the SDK reads chunk by chunk
    after its head, is bounded by neither SDK header, only by ours."""
    headers = {SDK_READ_TIMEOUT_HEADER: "7", SDK_TIMEOUT_HEADER: "9"}
    assert requested_timeout_s(headers) == pytest.approx(6.5)
    assert requested_timeout_s(headers, stream=True) is None
    assert requested_timeout_s({**headers, TIMEOUT_MS_HEADER: "12000"},
                               stream=True) == pytest.approx(12.0)


@pytest.mark.parametrize(("sdk", "ours"), [("1", 0.9), ("3", 2.7), ("5", 4.5), ("600", 599.5),
                                           ("0.05", 0.045)])
def test_the_router_answers_before_the_sdks_own_timeout(sdk: str, ours: float) -> None:
    """An SDK's timer started before the request arrived, so a deadline at the SDK's timeout
    answers after the SDK gave up (and retried, a side effect too): the router's deadline is
    a tenth shorter, by half a second at most. Our own header is the deadline as asked."""
    assert requested_timeout_s({SDK_READ_TIMEOUT_HEADER: sdk}) == pytest.approx(ours)
    assert requested_timeout_s({SDK_TIMEOUT_HEADER: sdk}) == pytest.approx(ours)
    millis = str(float(sdk) * 1000)
    assert requested_timeout_s({TIMEOUT_MS_HEADER: millis}) == pytest.approx(float(sdk))


def test_the_sdks_timeout_bounds_a_streams_head() -> None:
    """A stream's head (with its first token) is what the SDK waits for within its timeout:
    `head_timeout_s` is the SDKs' shortest, less the headroom; our own header is no part of
    it (it bounds the whole stream), and without an SDK header there is no head bound."""
    headers = {SDK_READ_TIMEOUT_HEADER: "3", SDK_TIMEOUT_HEADER: "9", TIMEOUT_MS_HEADER: "1000"}
    assert head_timeout_s(headers) == pytest.approx(2.7)
    assert head_timeout_s({TIMEOUT_MS_HEADER: "1000"}) is None
    assert head_timeout_s({SDK_READ_TIMEOUT_HEADER: "soon"}) is None


@pytest.mark.parametrize("bad", ["abc", "0", "-5", "nan", "inf", "1_000", "0x10", "1e309", "١٠٠٠"])
def test_invalid_own_header_is_a_400(bad: str) -> None:
    """A malformed `x-slorouter-timeout-ms` is rejected as a request error naming the header."""
    with pytest.raises(RequestError) as caught:
        requested_timeout_s({TIMEOUT_MS_HEADER: bad})
    assert caught.value.param == TIMEOUT_MS_HEADER


def test_invalid_sdk_header_is_ignored() -> None:
    """The SDK's header is advisory: an unparsable value leaves the policy default."""
    assert requested_timeout_s({SDK_TIMEOUT_HEADER: "soon"}) is None


def test_remaining_counts_down_and_expires() -> None:
    """Remaining time falls with the clock, never below zero, and then the deadline expires."""
    clock = FakeClock()
    deadline = Deadline.start(clock, 10.0)
    clock.advance(4.0)
    assert deadline.remaining() == pytest.approx(6.0)
    assert not deadline.expired()
    clock.advance(7.0)
    assert deadline.remaining() == 0.0
    assert deadline.expired()


@given(
    total=st.floats(0.01, 600),
    spent=st.floats(0, 700),
    connect=st.floats(0.01, 60),
    first=st.floats(0.01, 600),
    attempt=st.floats(0.01, 900),
)
def test_attempt_timeouts_never_exceed_remaining(
    total: float, spent: float, connect: float, first: float, attempt: float
) -> None:
    """Every per-attempt timeout is capped by the remaining deadline and by the attempt total."""
    clock = FakeClock()
    deadline = Deadline.start(clock, total)
    clock.advance(spent)
    timeouts = deadline.attempt_timeouts(AttemptTimeoutPolicy(connect, first, attempt))
    left = deadline.remaining()
    assert timeouts.total_s <= left
    assert timeouts.connect_s <= timeouts.total_s
    assert timeouts.first_token_s <= timeouts.total_s
    assert timeouts.total_s == min(attempt, left)
