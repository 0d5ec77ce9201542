"""The embedded result-cache backend: a diskcache directory (SQLite index + files), no service.

Several processes on one host may share the directory (SQLite WAL). TTL is diskcache's `expire`.
SQLite's busy timeout is kept short (`timeout_s`), so a locked database is a counted miss, not a
stalled event loop. A database found corrupt at start-up is deleted with every answer it held
(`cache.backends.disk_purge`), and the cache starts empty.

Blocking calls: a hit-path `get` costs a few tens of microseconds, far less than a hop to a
worker thread, so `get` runs inline by default; `set` (an SQLite write, occasionally a file
write and an eviction cull) runs in a worker thread by default: the answer being stored waits
for it (answers are stored before their end is sent), the other requests on the event loop do
not. Both choices are switches, measured by `bench/cache_ops.py` (numbers in docs/caching.md).

The answers are tenants' content, so the directory is made private to the user the router runs
as (mode 0700, whatever the umask): the files inside follow the umask, which a private directory
makes moot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from pathlib import Path

import diskcache

from cache.backends.disk_purge import open_cache
from cache.backends.failures import FailureLog
from cache.entry import CachedEntry, decode_entry, encode_entry
from cache.metrics import CacheMetrics

_ERRORS = (diskcache.Timeout, sqlite3.Error, OSError)


class DiskResultCache:
    """`ResultCache` over a diskcache directory."""

    def __init__(
        self,
        directory: str | Path,
        metrics: CacheMetrics,
        *,
        size_limit_bytes: int = 1 << 30,
        timeout_s: float = 0.05,
        offload_get: bool = False,
        offload_set: bool = True,
        log_interval_s: float = 10.0,
    ) -> None:
        make_private(Path(directory))
        opened = open_cache(Path(directory), lambda: diskcache.Cache(
            str(directory), timeout=timeout_s, size_limit=size_limit_bytes))
        self._cache = opened.cache
        # A corrupt database (a crash, a disk fault, a stray write): a cache is disposable, so
        # it starts empty rather than refuse to start until someone deletes it.
        self.corrupt = opened.corrupt  # the error for which it was deleted here, if it was
        self.files_deleted = opened.files_deleted  # by the above, or left by earlier versions
        self._failures = FailureLog("disk", metrics, log_interval_s)
        self._offload_get = offload_get
        self._offload_set = offload_set

    async def get(self, key: str) -> CachedEntry | None:
        """The entry under `key`, or None; a diskcache/SQLite failure is a counted miss."""
        try:
            if self._offload_get:
                raw = await asyncio.to_thread(self._cache.get, key)
            else:
                raw = self._cache.get(key)
        except _ERRORS as exc:
            self._failures.report("get", exc)
            return None
        return decode_entry(raw) if isinstance(raw, bytes) else None

    async def set(self, key: str, entry: CachedEntry, ttl_s: float) -> bool:
        """Store `entry` for `ttl_s` seconds; False when the write failed (counted)."""
        raw = encode_entry(entry)
        try:
            if self._offload_set:
                await asyncio.to_thread(self._cache.set, key, raw, ttl_s)
            else:
                self._cache.set(key, raw, expire=ttl_s)
        except _ERRORS as exc:
            self._failures.report("set", exc)
            return False
        return True

    def close(self) -> None:
        """Close the SQLite connections of this process."""
        self._cache.close()


def make_private(directory: Path) -> None:
    """Create `directory` (and its parents) if missing, and take every permission on it from
    group and others. A directory another user owns keeps the modes its owner gave it."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o077:
        with contextlib.suppress(PermissionError):
            os.chmod(directory, mode & 0o700)
