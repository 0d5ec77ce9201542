"""`router.redis_writes`: which Redis errors are refusals of writes, and a store's refusal
standing from the first refused write until the next accepted one (an injected clock)."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from router.redis_writes import WriteHealth, refusal_reason

OOM = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")


@pytest.mark.parametrize(("error", "reason"), [
    (OOM, "out of memory (maxmemory reached under noeviction)"),
    (ReadOnlyError("You can't write against a read only replica."), "read-only replica"),
    (ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently "
                   "unable to persist to disk."), "cannot persist (MISCONF)"),
    # The same reply to a command of a pipeline (the statistics push), as redis-py words it.
    (ResponseError("Command # 1 (HSET t:r:one:data chat 1) of pipeline caused error: (\"MISCONF"
                   " Redis is configured to save RDB snapshots, but it's currently unable to "
                   "persist to disk.\",)"), "cannot persist (MISCONF)"),
    (ResponseError("Command # 2 (SET MISCONF 1) of pipeline caused error: ('WRONGTYPE "
                   "Operation against a key holding the wrong kind of value',)"), None),
    (RedisTimeoutError("Timeout reading from socket"), None),
    (RedisConnectionError("Connection refused"), None),
    (NoScriptError("No matching script."), None),
    (OSError("unreachable"), None),
])
def test_only_refusals_of_writes_are_named(error: BaseException, reason: str | None) -> None:
    """Out of memory, read-only and MISCONF are refusals; a Redis down or slow, or a script
    error, is not (that is `/readyz`'s PING, or a bug)."""
    assert refusal_reason(error) == reason


def test_a_refusal_stands_until_a_write_is_accepted() -> None:
    """The first refusal starts it, later ones count, an accepted write ends it; errors that
    are not refusals change nothing."""
    now = [100.0]
    health = WriteHealth("idempotency", clock=lambda: now[0])
    assert health.refusal is None and health.describe("keyed requests refused") is None
    health.failed(OOM)
    now[0] = 103.0
    health.failed(RedisTimeoutError("slow"))
    health.failed(OOM)
    now[0] = 110.0
    refusal = health.refusal
    assert refusal is not None and (refusal.since, refusal.last, refusal.count) == (
        100.0, 103.0, 2)
    assert health.describe("keyed requests refused") == (
        "redis refuses writes (out of memory (maxmemory reached under noeviction)) since 10s "
        "ago, 2 refused, the last 7s ago: keyed requests refused")
    health.accepted()
    assert health.refusal is None


def test_a_different_refusal_starts_afresh() -> None:
    """A failover after running out of memory: the reason shown is the current one."""
    now = [0.0]
    health = WriteHealth("experiments", clock=lambda: now[0])
    health.failed(OOM)
    now[0] = 5.0
    health.failed(ReadOnlyError("You can't write against a read only replica."))
    refusal = health.refusal
    assert refusal is not None
    assert (refusal.reason, refusal.since, refusal.count) == ("read-only replica", 5.0, 1)
