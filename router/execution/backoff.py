"""Retry delays: capped exponential backoff with full jitter, honouring `Retry-After`.

Pure functions with injected randomness (`random.Random`) and, for HTTP dates, an injected
wall-clock time. `retry_delay` is the one the execution loop calls: it never returns a delay
shorter than the provider's `Retry-After`, and returns `None` (do not retry this candidate) when
that wait would not fit in the request's remaining deadline.

Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"):
`sleep = uniform(0, min(cap, base * multiplier ** attempt))`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Exponential backoff parameters (seconds). `attempt` 0 is the first retry."""

    base_s: float = 0.05
    cap_s: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.cap_s < 0 or self.multiplier < 1:
            raise ValueError("backoff needs base_s >= 0, cap_s >= 0, multiplier >= 1")


def ceiling(policy: BackoffPolicy, attempt: int) -> float:
    """The upper end of the jitter window for retry number `attempt` (0-based)."""
    if attempt < 0:
        raise ValueError("attempt must be >= 0")
    try:
        grown = policy.base_s * policy.multiplier**attempt
    except OverflowError:
        return policy.cap_s
    return min(policy.cap_s, grown)


def full_jitter(policy: BackoffPolicy, attempt: int, rng: random.Random) -> float:
    """A delay drawn uniformly from [0, ceiling]: never above the cap."""
    return rng.uniform(0.0, ceiling(policy, attempt))


def retry_delay(
    policy: BackoffPolicy,
    attempt: int,
    rng: random.Random,
    *,
    retry_after_s: float | None,
    remaining_s: float,
) -> float | None:
    """The wait before retrying the same candidate, or `None` to move on.

    The delay is the jittered backoff, raised to `retry_after_s` when the provider asked for
    more. If the wait would use up the remaining deadline, retrying here is pointless: `None`.
    """
    delay = full_jitter(policy, attempt, rng)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    if delay >= remaining_s:
        return None
    return delay


def parse_retry_after(value: str, now_epoch_s: float) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta-seconds or HTTP-date), else `None`."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _parse_http_date(text, now_epoch_s)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _parse_http_date(text: str, now_epoch_s: float) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_epoch_s)


def retry_after_from_headers(headers: Mapping[str, str], now_epoch_s: float) -> float | None:
    """Seconds to wait from lower-cased response headers: `retry-after-ms` wins over
    `retry-after` (OpenAI and Azure send the finer one)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        ms = parse_retry_after(raw_ms, now_epoch_s)
        if ms is not None and _is_number(raw_ms):
            return ms / 1000.0
    raw = headers.get("retry-after")
    if raw is not None:
        return parse_retry_after(raw, now_epoch_s)
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
