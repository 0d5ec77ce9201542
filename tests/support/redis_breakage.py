"""Ways to make a real redis-server answer but refuse writes, each with the way to mend it.

Out of memory under `noeviction` (`maxmemory` 1 byte), a read-only replica (`REPLICAOF` a
primary: by default an address nobody answers, so it keeps serving what it holds), and a
server that cannot persist (snapshots on, and one that fails because its directory is gone:
MISCONF refuses writes, and PING). `REFUSALS` pairs each with its mend and the reason
`router.redis_writes.refusal_reason` gives, for `pytest.mark.parametrize(..., ids=REFUSAL_IDS)`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import redis

Breakage = Callable[[redis.Redis], None]


def out_of_memory(admin: redis.Redis) -> None:
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)


def memory_back(admin: redis.Redis) -> None:
    admin.config_set("maxmemory", 0)


def read_only(admin: redis.Redis, primary_port: int = 9) -> None:
    admin.replicaof("127.0.0.1", primary_port)


def promoted(admin: redis.Redis) -> None:
    admin.replicaof("NO", "ONE")


def cannot_persist(admin: redis.Redis) -> None:
    """Snapshots on, and one that fails: the server's `dir` is removed, so start it with a
    `--dir` of its own."""
    shutil.rmtree(str(admin.config_get("dir")["dir"]))
    admin.config_set("save", "3600 1")
    admin.bgsave()
    waited_until = time.monotonic() + 10
    while admin.info("persistence")["rdb_last_bgsave_status"] != "err":
        assert time.monotonic() < waited_until
        time.sleep(0.02)


def snapshots_off(admin: redis.Redis) -> None:
    admin.config_set("save", "")


REFUSALS: list[tuple[Breakage, Breakage, str]] = [
    (out_of_memory, memory_back, "out of memory"),
    (read_only, promoted, "read-only replica"),
    (cannot_persist, snapshots_off, "cannot persist (MISCONF)"),
]
REFUSAL_IDS = ["oom-noeviction", "readonly-replica", "misconf"]
