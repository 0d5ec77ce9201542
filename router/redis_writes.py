"""Whether a shared Redis takes writes, learned from the replies to the writes already made.

A Redis out of memory under `noeviction` (`OOM command not allowed when used memory >
'maxmemory'`), a replica left behind by a failover (`READONLY You can't write against a read
only replica`) or one that cannot persist (`MISCONF`, `stop-writes-on-bgsave-error`) answers
PINGs and reads but refuses every write. A store that writes (idempotency claims, experiment
outcomes, result-cache sets, statistics pushes) tells its `WriteHealth` of each reply: a
refusal marks it refusing (logged once, event `redis_writes_refused`), the next accepted write
clears it (`redis_writes_accepted`). No request pays a round trip for this; only `/readyz`,
while a refusal stands, sends one write of its own (`probe_write`) so that a store no request
writes to meanwhile still sees the recovery (the statistics store needs none: it pushes every
second).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError, ResponseError

from router.logs import event

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("slorouter.redis_writes")

# The key `probe_write` sets (for a second): never one of the stores' own.
PROBE_KEY = "slorouter:write-probe"
# MISCONF has no exception class of its own, so it is told by its reply's text, which redis-py
# prefixes in a pipeline: `Command # 1 (HSET ...) of pipeline caused error: ("MISCONF ...",)`.
_MISCONF = re.compile(r"(?:Command # \d+ .*? of pipeline caused error: \(['\"])?MISCONF ",
                      re.DOTALL)


def refusal_reason(exc: BaseException) -> str | None:
    """Why Redis refused a write, when `exc` is such a refusal (it never ran), else None (a
    timeout, a lost connection, a script's own error: not a refusal of writes)."""
    if isinstance(exc, OutOfMemoryError):
        return "out of memory (maxmemory reached under noeviction)"
    if isinstance(exc, ReadOnlyError):
        return "read-only replica"
    if isinstance(exc, ResponseError) and _MISCONF.match(str(exc)):
        return "cannot persist (MISCONF)"
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A standing refusal: why, when the first and the latest came, and how many since."""

    reason: str
    since: float
    last: float
    count: int


class WriteHealth:
    """The writes of one store to its Redis: refused since when, or accepted (None)."""

    def __init__(self, store: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._refusal: Refusal | None = None

    @property
    def refusal(self) -> Refusal | None:
        return self._refusal

    def accepted(self) -> None:
        """A write went through: any refusal is over."""
        if self._refusal is not None:
            event(log, "redis_writes_accepted", store=self._store,
                  refused=self._refusal.count,
                  refused_for_s=round(self._clock() - self._refusal.since, 1))
            self._refusal = None

    def failed(self, exc: BaseException) -> None:
        """A write failed with `exc`: a refusal is recorded; other errors (Redis unreachable,
        which `/readyz`'s PING shows) are not this module's."""
        reason = refusal_reason(exc)
        if reason is None:
            return
        now = self._clock()
        current = self._refusal
        if current is None or current.reason != reason:
            event(log, "redis_writes_refused", logging.WARNING, store=self._store,
                  reason=reason, error=type(exc).__name__)
            self._refusal = Refusal(reason, now, now, 1)
        else:
            self._refusal = Refusal(reason, current.since, now, current.count + 1)

    def describe(self, consequence: str) -> str | None:
        """The `/readyz` detail of a standing refusal, with what it costs, else None."""
        refusal = self._refusal
        if refusal is None:
            return None
        now = self._clock()
        return (f"redis refuses writes ({refusal.reason}) since {now - refusal.since:.0f}s ago, "
                f"{refusal.count} refused, the last {now - refusal.last:.0f}s ago: "
                f"{consequence}")


async def probe_write(client: Redis, health: WriteHealth) -> None:
    """While `health` holds a refusal, try one small write (a key of its own, for a second)
    through `client` (the store's own, pooled: no new connection) and tell `health` how it
    went; nothing when no refusal stands or Redis does not answer. The caller bounds its time
    (`/readyz`'s budget)."""
    if health.refusal is None:
        return
    try:
        await client.set(PROBE_KEY, b"1", px=1000)
    except (OSError, RedisError) as exc:
        health.failed(exc)
        return
    health.accepted()
