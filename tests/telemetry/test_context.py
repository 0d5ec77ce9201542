"""W3C trace context: parsing, continuation, sampling and per-attempt propagation."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import TraceState

from router.telemetry.context import (
    TraceContext,
    attempt_span_id,
    attempt_traceparent,
    parse_traceparent,
    propagation_headers,
    ratio_sampled,
    start_trace,
    trace_headers,
    valid_tracestate,
)
from tests.telemetry.helpers import CLIENT_TRACEPARENT


def test_client_traceparent_is_continued_with_its_sampling_decision() -> None:
    """A valid incoming traceparent keeps its trace id, becomes the parent, keeps its flag."""
    trace_hex, parent_hex = CLIENT_TRACEPARENT.split("-")[1:3]
    trace = start_trace(CLIENT_TRACEPARENT)
    unsampled = start_trace(CLIENT_TRACEPARENT[:-2] + "00")
    assert (trace.trace_id_hex, trace.parent_span_id, trace.sampled) == (
        trace_hex, int(parent_hex, 16), True)
    assert unsampled.sampled is False
    assert trace.span_id not in (0, trace.parent_span_id)


def test_invalid_traceparents_start_a_new_root() -> None:
    """Malformed, all-zero or version-ff headers are ignored, per the W3C spec."""
    bad = [None, "", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           CLIENT_TRACEPARENT + "-extra"]
    assert all(parse_traceparent(header) is None for header in bad)
    assert start_trace("garbage").parent_span_id is None


def test_attempt_traceparent_names_a_distinct_stable_span_per_attempt() -> None:
    """Each attempt's header carries the trace id and its own span id, the same every time."""
    trace = start_trace(CLIENT_TRACEPARENT, draw=random.Random(3).getrandbits)
    headers = [attempt_traceparent(trace, n) for n in (1, 2, 3)]
    span_hexes = [h.split("-")[2] for h in headers]
    assert all(h.split("-")[1] == trace.trace_id_hex for h in headers)
    assert span_hexes == [f"{attempt_span_id(trace, n):016x}" for n in (1, 2, 3)]
    assert len(set(span_hexes) | {trace.span_id_hex}) == 4
    assert headers == [attempt_traceparent(trace, n) for n in (1, 2, 3)]


def test_tracestate_travels_with_the_traceparent() -> None:
    """An incoming tracestate is forwarded unchanged to providers."""
    trace = start_trace(CLIENT_TRACEPARENT, tracestate="vendor=abc")
    assert propagation_headers(trace, 1)["tracestate"] == "vendor=abc"
    assert propagation_headers(None, 1) == {}


def test_root_sampling_follows_the_ratio() -> None:
    """New roots are sampled by the trace-id ratio rule: 0 never, 1 always, 0.25 about a quarter."""
    rng = random.Random(11)
    ids = [rng.getrandbits(128) for _ in range(4000)]
    share = sum(ratio_sampled(i, 0.25) for i in ids) / len(ids)
    assert not any(ratio_sampled(i, 0.0) for i in ids)
    assert all(ratio_sampled(i, 1.0) for i in ids)
    assert 0.2 < share < 0.3


@given(st.integers(min_value=1, max_value=(1 << 64) - 1), st.integers(min_value=1, max_value=64))
def test_attempt_span_ids_are_distinct_nonzero_64_bit_and_not_the_server_span(
        span_id: int, attempts: int) -> None:
    trace = TraceContext(trace_id=1, span_id=span_id, parent_span_id=None, sampled=True)
    ids = [attempt_span_id(trace, n) for n in range(1, attempts + 1)]
    assert all(0 < i < 1 << 64 for i in ids)
    assert len(set(ids) | {span_id}) == attempts + 1


def test_an_uppercase_traceparent_is_ignored() -> None:
    """W3C allows lowercase hex only: an uppercase header starts a new root (it was continued)."""
    assert parse_traceparent(CLIENT_TRACEPARENT.upper()) is None
    assert start_trace(CLIENT_TRACEPARENT.upper()).parent_span_id is None


def test_without_span_export_the_upstream_is_given_a_span_that_exists() -> None:
    """No attempt span is exported to be the provider's parent, so the upstream's
    `traceparent` names the client's span (the client's header, passed on), or with no client
    header the server span id the logs carry; it used to name attempt spans that never exist."""
    continued = start_trace(CLIENT_TRACEPARENT, exported=False)
    assert attempt_traceparent(continued, 2) == CLIENT_TRACEPARENT
    root = start_trace(None, ratio=1.0, exported=False)
    assert attempt_traceparent(root, 1) == f"00-{root.trace_id_hex}-{root.span_id_hex}-01"


@pytest.mark.parametrize("tracestate", [
    "evil=1, \xff\xfe zzzz",  # not ASCII
    "vendor=abc\r\nx-injected: 1",  # a header of its own
    "Vendor=abc",  # keys are lowercase
    "vendor",  # no value
    "vendor=abc, " + ",".join(f"k{i}=v" for i in range(32)),  # 33 members
    "vendor=" + "a" * 600,  # a value over 256 characters
    "foo=1,bar=2,foo=3",  # a key twice
    "vendor=ok,1abc=hello",  # a simple key with a digit first (a tenant may have one)
    "a" * 242 + "@v=1",  # a tenant over 241 characters
    "a" * 257 + "=1",  # a simple key over 256 characters
    "acme@1sys=1",  # a system with a digit first
    "acme@" + "s" * 15 + "=1",  # a system over 14 characters
])
def test_a_tracestate_that_is_not_one_is_not_forwarded(tracestate: str) -> None:
    trace = start_trace(CLIENT_TRACEPARENT, tracestate=tracestate)
    assert "tracestate" not in propagation_headers(trace, 1)


MEMBERS = ["rojo=00f067aa0ba902b7", "1abc=hello", "1abc@vendor=x", "a" * 256 + "=1",
           "a" * 257 + "=1", "a" * 241 + "@" + "v" * 14 + "=1", "a" * 242 + "@v=1",
           "acme@" + "s" * 15 + "=1", "acme@1sys=1", "k=" + "v" * 256, "k=" + "v" * 257,
           "k=a b", "k=a ", "k*/_-=x", "_k=x", "Vendor=x", "k=[REDACTED]", "[REDACTED]=x"]


@pytest.mark.parametrize("member", MEMBERS)
def test_a_tracestate_member_is_kept_exactly_when_the_sdk_keeps_it(member: str) -> None:
    """W3C's grammar, as the OpenTelemetry SDK reads it: a member kept here that the SDK
    refuses made it drop the whole header from every span and log the member's text (a key
    with a digit first, a tenant of 242 characters: the telemetry audit of 2026-12-07)."""
    assert (valid_tracestate(member) is not None) == (
        len(TraceState.from_header([member])) > 0), member


def test_a_tracestate_over_512_characters_is_cut_as_w3c_says() -> None:
    """Members over 128 characters go first (the last of them first), then members from the
    end, until the rest fits in 512; it used to be dropped whole."""
    small = [f"k{i:02d}=" + "v" * 36 for i in range(8)]  # 40 characters each
    large = ["big1=" + "b" * 130, "big2=" + "c" * 135]  # 135 and 140
    header = ",".join([small[0], large[0], *small[1:4], large[1], *small[4:]])  # 604
    assert _forwarded(header) == ",".join([small[0], large[0], *small[1:]])  # 463
    huge = ",".join([small[0], "big1=" + "b" * 250, *small[1:4], "big2=" + "c" * 250, *small[4:]])
    assert _forwarded(huge) == ",".join(small)  # both large members had to go
    only_small = [f"k{i:02d}=" + "v" * 60 for i in range(12)]  # 64 each, 779 in all
    kept = _forwarded(",".join(only_small)).split(",")
    assert kept == only_small[:len(kept)]
    assert len(",".join(kept)) <= 512 < len(",".join(only_small[:len(kept) + 1]))


def _forwarded(tracestate: str) -> str:
    return propagation_headers(start_trace(CLIENT_TRACEPARENT, tracestate=tracestate),
                               1)["tracestate"]


def test_a_valid_tracestate_is_forwarded_with_its_members_in_order() -> None:
    trace = start_trace(CLIENT_TRACEPARENT, tracestate="congo=t61rcWkgMzE,  rojo=00f067aa0ba902b7,"
                                                       " acme@sys=a b")
    assert propagation_headers(trace, 1)["tracestate"] == (
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,acme@sys=a b")


def test_header_lines_give_one_traceparent_or_none_and_one_tracestate_list() -> None:
    """A `traceparent` line repeated is no parent (W3C: not a list); `tracestate` lines are one
    list, in order; header names arrive in lower case (ASGI)."""
    parent, other = CLIENT_TRACEPARENT.encode(), b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"
    assert trace_headers([(b"x-request-id", b"r"), (b"traceparent", parent)]) == (
        CLIENT_TRACEPARENT, None)
    assert trace_headers([(b"traceparent", parent), (b"traceparent", other)]) == (None, None)
    assert trace_headers([(b"tracestate", b"a=1,b=2"), (b"traceparent", parent),
                          (b"tracestate", b"c=3")]) == (CLIENT_TRACEPARENT, "a=1,b=2,c=3")
