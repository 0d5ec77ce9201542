"""Cacheability: may this request read the result cache, may its answer be written, and why not.

Pure functions only. `decide(...)` combines, in this order (the first bypass reason wins):
unknown request fields, the policy's cache rule, risk `high`, side effects, live data (web
search, audio output), determinism (temperature 0 or a seed, unless the rule waives it), and the
request's `Cache-Control` header (`no-cache`: skip the read; `no-store`: skip the write).

What does not live here: key derivation (`cache.keys`), whether a *response* may be written
(errors, cut streams: `cache.result.CachedEntry.from_completion`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

from cache.keys import unknown_fields
from policies.labels import Risk, Signal, Task

BypassReason = Literal[
    "unknown_field",
    "disabled",
    "high_risk",
    "side_effects",
    "live_data",
    "audio_output",
    "nondeterministic",
    "no_cache",
    "no_store",
]
BYPASS_REASONS: Final[tuple[BypassReason, ...]] = get_args(BypassReason)

SIDE_EFFECT_TASKS: Final[frozenset[Task]] = frozenset({"action"})


@dataclass(frozen=True, slots=True)
class CacheRule:
    """The result-cache rule of the policy that handles the request.

    `ttl_s` is the freshness window. `require_deterministic=False` lets a policy cache sampled
    answers too (a FAQ bot that is happy to repeat itself).
    """

    enabled: bool = True
    ttl_s: float = 300.0
    require_deterministic: bool = True


@dataclass(frozen=True, slots=True)
class CacheControl:
    """The request's `Cache-Control` directives that slorouter honours."""

    no_cache: bool = False
    no_store: bool = False
    # `max-age=N`: no stored answer older than N seconds (RFC 9111 5.2.1.1); 0 asks for a fresh
    # one, which is stored as `no-cache`'s is
    max_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class CacheDecision:
    """What the pipeline may do with the result cache for one request.

    `bypass_reason` is set whenever `read` is False (the response is then labelled `bypass`),
    and also names why `write` is False when only the write is skipped.
    """

    read: bool
    write: bool
    bypass_reason: BypassReason | None
    ttl_s: float = 0.0
    max_age_s: float | None = None  # the client's `max-age`: older entries are misses

    @property
    def uses_cache(self) -> bool:
        """True when a key is worth deriving at all."""
        return self.read or self.write


def parse_cache_control(header: str | None) -> CacheControl:
    """Parse a `Cache-Control` request header; unknown directives are ignored (RFC 9111)."""
    if not header:
        return CacheControl()
    directives: dict[str, str] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        directives.setdefault(name.strip().lower(), value.strip().strip('"'))
    age = directives.get("max-age")
    return CacheControl(no_cache="no-cache" in directives, no_store="no-store" in directives,
                        max_age_s=float(age) if age is not None and age.isdigit() else None)


def is_deterministic(request_fields: Mapping[str, object]) -> bool:
    """Temperature 0 or an explicit seed: deterministic enough to repeat the answer."""
    temperature = request_fields.get("temperature")
    seed = request_fields.get("seed")
    zero = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    return (zero and temperature == 0) or (seed is not None and not isinstance(seed, bool))


def _content_reason(request_fields: Mapping[str, object]) -> BypassReason | None:
    """Reasons found in the request body itself, before determinism."""
    if request_fields.get("web_search_options") is not None:
        return "live_data"  # the web has no data version: yesterday's answer may be wrong today
    modalities = request_fields.get("modalities")
    if isinstance(modalities, list) and "audio" in modalities:
        return "audio_output"  # audio ids expire at the provider; a replayed id would dangle
    return None


def _never_reason(
    request_fields: Mapping[str, object],
    rule: CacheRule,
    task: Task,
    risk: Risk,
    signals: Collection[Signal],
) -> BypassReason | None:
    """The first reason that forbids both the read and the write, or None."""
    if unknown_fields(request_fields):
        return "unknown_field"
    if not rule.enabled:
        return "disabled"
    if risk == "high":
        return "high_risk"
    if "side_effects" in signals or task in SIDE_EFFECT_TASKS:
        return "side_effects"
    reason = _content_reason(request_fields)
    if reason is not None:
        return reason
    if rule.require_deterministic and not is_deterministic(request_fields):
        return "nondeterministic"
    return None


def decide(
    request_fields: Mapping[str, object],
    rule: CacheRule,
    *,
    task: Task,
    risk: Risk,
    signals: Collection[Signal] = frozenset(),
    control: CacheControl = CacheControl(),
) -> CacheDecision:
    """The cacheability decision for one request (pure)."""
    never = _never_reason(request_fields, rule, task, risk, signals)
    if never is not None:
        return CacheDecision(read=False, write=False, bypass_reason=never)
    read, write = not control.no_cache, not control.no_store
    reason: BypassReason | None = None
    if not read:
        reason = "no_cache"
    elif not write:
        reason = "no_store"
    return CacheDecision(read=read, write=write, bypass_reason=reason, ttl_s=rule.ttl_s,
                         max_age_s=control.max_age_s)
