"""Reuse of each candidate's `Blend` across requests, for at most `reuse_s`.

Most of a prediction does not depend on the request: the levels' weights against the prior and
the TPOT and error-rate estimates change only when a summary changes (at a statistics refresh)
or as their weights decay. `BlendCache.get` returns the blend made for the same deployment, task
and prompt bucket while it was made from the very same summaries and prior, less than `reuse_s`
ago; otherwise it blends anew. So a reused blend's decay is at most `reuse_s` late (with a 5 s
half-life and 0.1 s, its weights are within 1.4% of exact), which is the staleness the
summaries themselves already have between refreshes. What the request brings (prompt size,
output tokens, the age of a waiting attempt) is never reused: `predict` applies it every time.

Entries live between `reuse_s / 2` and `reuse_s`, staggered by key (a fixed share per key from
its CRC-32): the candidates of one request are blended together on a first request and would
otherwise all expire together, so that one request in every `reuse_s` would blend every
candidate again (at 100 requests/s, one request in ten: that is the p99). Staggered, each
request re-blends about one candidate in ten.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

from router.scoring.predict import blend
from router.scoring.types import Blend, Prior
from router.stats.estimators import KeySummary
from router.stats.store import StatsView

Key = tuple[str, str, int]  # deployment, task, prompt bucket


class _Entry(NamedTuple):
    bucket: KeySummary | None
    task: KeySummary | None
    deployment_all: KeySummary | None
    prior: Prior
    error_z: float
    blend: Blend
    lifetime_s: float


class BlendCache:
    """The last blend per (deployment, task, prompt bucket); see the module docstring."""

    def __init__(self, reuse_s: float = 0.1, max_entries: int = 4096) -> None:
        self.reuse_s = reuse_s
        self.max_entries = max_entries
        self._entries: dict[Key, _Entry] = {}

    def get(self, key: Key, stats: StatsView, prior: Prior, error_z: float,
            now: float) -> Blend:
        entry = self._entries.get(key)
        if (entry is not None and entry[0] is stats.bucket and entry[1] is stats.task
                and entry[2] is stats.deployment_all
                and (entry[3] is prior or entry[3] == prior) and entry[4] == error_z
                and 0.0 <= now - entry[5].at < entry[6]):
            return entry[5]
        made = blend(stats, prior, error_z, now)
        if len(self._entries) >= self.max_entries:  # deployments of an older config
            self._entries.clear()
        lifetime = entry[6] if entry is not None else self.lifetime_s(key)
        self._entries[key] = _Entry(stats.bucket, stats.task, stats.deployment_all, prior,
                                    error_z, made, lifetime)
        return made

    def lifetime_s(self, key: Key) -> float:
        """How long `key`'s blends are reused: within [reuse_s / 2, reuse_s), fixed per key."""
        share = zlib.crc32(f"{key[0]}\x00{key[1]}\x00{key[2]}".encode()) / 2**32
        return self.reuse_s * (0.5 + 0.5 * share)
