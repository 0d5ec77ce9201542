"""W3C trace context: continue the client's `traceparent`, pre-generate span ids, propagate.

Pure functions with injected randomness. At arrival the handler calls `start_trace(header)`;
the returned `TraceContext` fixes the trace id, the server span's id and whether the trace is
sampled, so that the `traceparent` sent with each upstream attempt (`attempt_traceparent`) names
the attempt span that telemetry will later build from the recorded outcome. Attempt span ids are
derived from the server span id and the attempt number, so nothing per attempt needs storing.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_SAMPLED = 0x01
# A `tracestate` list member (W3C Trace Context, section 3.3.1.3): a simple key (a lowercase
# letter first, 256 characters at most) or a multi-tenant one (`tenant@system`: a tenant of
# 241 at most, which may begin with a digit, and a system of 14 at most, a letter first), `=`,
# and a value of printable ASCII but `,` and `=`, not ending in a space. The OpenTelemetry
# SDK's grammar to the character: given a member it refuses, the SDK drops the whole header
# from the spans and logs a WARNING quoting the member. Until 2026-12-07 a simple key with a
# digit first (`1abc=x`) or a tenant of 242-256 characters passed here: forwarded to the
# providers, and its text logged for every request.
_TRACESTATE_MEMBER = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_TRACESTATE_MAX_CHARS = 512  # what a hop keeps of it
_TRACESTATE_LARGE_MEMBER_CHARS = 128  # members over this are the first removed to keep to it
_TRACESTATE_MAX_MEMBER_CHARS = 256 + 1 + 256  # the longest member the grammar allows
_TRACESTATE_MAX_MEMBERS = 32
_MAX64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd: n x it differs for every 64-bit n

RandomBits = Callable[[int], int]



class ServedRequest(Protocol):
    """What a log line tells of the request being served (a `router.outcomes.Outcome` fits)."""

    @property
    def request_id(self) -> str: ...

    @property
    def trace(self) -> TraceContext | None: ...


# The request being served, for log correlation (see `redact.TraceLogFilter`): every line logged
# while serving it, the libraries' own included, carries its request id and trace ids.
current_request: ContextVar[ServedRequest | None] = ContextVar("slorouter_request", default=None)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """Ids of one request's trace: the server span, its remote parent (if any), sampling."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    sampled: bool
    tracestate: str | None = None
    # Whether this process exports spans: if not, no attempt span will exist to be a parent,
    # so the upstream's `traceparent` names the client's span (or the server span of the logs).
    exported: bool = True

    @property
    def trace_id_hex(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def span_id_hex(self) -> str:
        return f"{self.span_id:016x}"


def parse_traceparent(header: str | None) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) from a valid W3C `traceparent`, else None."""
    if header is None:
        return None
    match = _TRACEPARENT.match(header.strip())  # lowercase hex only, as W3C requires
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, bool(int(flags_hex, 16) & _SAMPLED)


def trace_headers(lines: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """The `traceparent` and `tracestate` of a request's header lines (ASGI's, names in lower
    case), as W3C reads them: a `traceparent` sent more than once is none (it is not a list, so
    no one of them is the parent: a new trace starts), and `tracestate` lines are one list,
    their members joined in order (RFC 9110's combination of a repeated list field)."""
    parents: list[str] = []
    states: list[str] = []
    for name, value in lines:
        if name == b"traceparent":
            parents.append(value.decode("latin-1"))
        elif name == b"tracestate":
            states.append(value.decode("latin-1"))
    return (parents[0] if len(parents) == 1 else None), (",".join(states) if states else None)


def valid_tracestate(header: str | None) -> str | None:
    """The client's W3C `tracestate` when it is one (at most 32 `key=value` members of printable
    ASCII, each key once), else None: it travels to the providers, so it must not carry anything
    else the client chose. One longer than the 512 characters W3C has every hop keep is cut to
    them the way W3C says: members over 128 characters go first, then members from the end."""
    if header is None or len(header) > _TRACESTATE_MAX_MEMBERS * _TRACESTATE_MAX_MEMBER_CHARS:
        return None
    members = [m.strip(" \t") for m in header.split(",")]
    members = [m for m in members if m]
    if not members or len(members) > _TRACESTATE_MAX_MEMBERS:
        return None
    if not all(_TRACESTATE_MEMBER.fullmatch(m) for m in members):
        return None
    if len({m.split("=", 1)[0] for m in members}) != len(members):  # a key twice: not a list
        return None
    return ",".join(_trimmed(members)) or None


def _trimmed(members: list[str]) -> list[str]:
    """`members` cut to fit `_TRACESTATE_MAX_CHARS` once joined with commas (W3C Trace Context,
    section 3.3.1.5: entries over 128 characters are removed first, then entries from the end)."""
    kept = list(members)
    length = sum(map(len, kept)) + len(kept) - 1
    large = [i for i, m in enumerate(kept) if len(m) > _TRACESTATE_LARGE_MEMBER_CHARS]
    while length > _TRACESTATE_MAX_CHARS and kept:
        index = large.pop() if large else len(kept) - 1
        length -= len(kept.pop(index)) + 1
    return kept


def _nonzero(bits: int, draw: RandomBits) -> int:
    value = draw(bits)
    while value == 0:
        value = draw(bits)
    return value


def ratio_sampled(trace_id: int, ratio: float) -> bool:
    """The TraceIdRatioBased rule: the low 64 bits of the trace id under `ratio` of 2**64."""
    return (trace_id & _MAX64) < int(ratio * (_MAX64 + 1))


def start_trace(traceparent: str | None, tracestate: str | None = None, ratio: float = 1.0,
                draw: RandomBits = random.getrandbits, *, exported: bool = True) -> TraceContext:
    """Continue the client's trace (keeping its sampling decision) or start a new one."""
    span_id = _nonzero(64, draw)
    parent = parse_traceparent(traceparent)
    if parent is not None:
        trace_id, parent_id, sampled = parent
        return TraceContext(trace_id, span_id, parent_id, sampled, valid_tracestate(tracestate),
                            exported)
    trace_id = _nonzero(128, draw)
    return TraceContext(trace_id, span_id, None, ratio_sampled(trace_id, ratio),
                        exported=exported)


def attempt_span_id(trace: TraceContext, number: int) -> int:
    """The span id of upstream attempt `number` (1-based), mixed from the server span id.

    SplitMix64's finaliser over `span_id + number x golden ratio`: a bijection of 64-bit
    integers, so attempts of one request never share an id, and plain integer arithmetic (a
    keyed hash cost ~20 us more per attempt when requests come far apart, its code cold)."""
    z = (trace.span_id + _GOLDEN * number) & _MAX64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MAX64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MAX64
    z ^= z >> 31
    return z if z != 0 else 1


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def attempt_traceparent(trace: TraceContext, number: int) -> str:
    """The `traceparent` header for upstream attempt `number`, naming that attempt's span; with
    no span exported, the client's span (its header passed on) or else the server span's id."""
    if not trace.exported:
        parent = trace.parent_span_id if trace.parent_span_id is not None else trace.span_id
        return format_traceparent(trace.trace_id, parent, trace.sampled)
    return format_traceparent(trace.trace_id, attempt_span_id(trace, number), trace.sampled)


def propagation_headers(trace: TraceContext | None, number: int) -> dict[str, str]:
    """Headers to add to upstream attempt `number`: `traceparent` (and `tracestate`)."""
    if trace is None:
        return {}
    headers = {"traceparent": attempt_traceparent(trace, number)}
    if trace.tracestate:
        headers["tracestate"] = trace.tracestate
    return headers
