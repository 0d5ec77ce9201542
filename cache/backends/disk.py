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
makes moot. A directory removed while the router runs (`rm -rf` to clear the cache) is noticed at
the next write: diskcache would recreate it under the umask (0755, answers readable by every
local user) and keep its rows in the deleted database, so its new files outlived their TTL; the
cache is opened afresh in a new private directory instead.

A full disk: diskcache culls expired entries inside the write that fails, so a cache that
filled stayed full after all its entries had expired, and each failed write left a value file
that no row names. A write that finds the disk full expires entries and deletes such files
itself (at most once per `RECLAIM_INTERVAL_S`), and `degraded()` says so to `/readyz` until a
write succeeds again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import stat
import time
from pathlib import Path

import diskcache

from cache.backends.disk_purge import delete_expired_values, open_cache, sweep_unreferenced
from cache.backends.failures import FailureLog
from cache.entry import CachedEntry, decode_entry, encode_entry
from cache.metrics import CacheMetrics

_ERRORS = (diskcache.Timeout, sqlite3.Error, OSError)
RECLAIM_INTERVAL_S = 10.0  # between two reclaims of a full disk's expired entries


def disk_full(err: BaseException) -> bool:
    """Whether a write failed for want of space (the filesystem's or SQLite's own report)."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


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
        self._directory = Path(directory)
        self._connect = lambda: diskcache.Cache(str(directory), timeout=timeout_s,
                                                size_limit=size_limit_bytes)
        make_private(self._directory)
        opened = open_cache(self._directory, self._connect)
        self._cache = opened.cache
        self._identity = self._database_identity()
        self._full_since: float | None = None  # monotonic time of the first full-disk failure
        self._reclaimed_at = float("-inf")
        self.reopened = 0  # times the directory was found removed and the cache made anew
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
            self._same_directory()
            if self._offload_set:
                await asyncio.to_thread(self._cache.set, key, raw, ttl_s)
            else:
                self._cache.set(key, raw, expire=ttl_s)
        except _ERRORS as exc:
            self._failures.report("set", exc)
            if disk_full(exc):
                await self._reclaim()
            return False
        self._full_since = None
        return True

    def degraded(self) -> str | None:
        """Why answers are not being stored now, for `/readyz`: the disk has been full since
        the first write that found it so (no write has succeeded since)."""
        if self._full_since is None:
            return None
        return (f"disk full for {time.monotonic() - self._full_since:.0f}s: answers are not "
                "stored (expired entries are reclaimed as writes fail)")

    def _same_directory(self) -> None:
        """Open the cache afresh, in a private directory, when its database was removed (with
        the directory, or the directory's content) or replaced since it was opened."""
        try:
            if self._database_identity() == self._identity:
                return
        except FileNotFoundError:
            pass
        self._cache.close()
        make_private(self._directory)
        self._cache = open_cache(self._directory, self._connect).cache
        self._identity = self._database_identity()
        self.reopened += 1
        self._failures.note("directory_replaced")

    def _database_identity(self) -> tuple[int, int]:
        found = (self._directory / diskcache.core.DBNAME).stat()
        return found.st_dev, found.st_ino

    async def _reclaim(self) -> None:
        """Make room on a full disk: expired entries out, value files no row names deleted."""
        now = time.monotonic()
        if self._full_since is None:
            self._full_since = now
        if now - self._reclaimed_at < RECLAIM_INTERVAL_S:
            return
        self._reclaimed_at = now

        def reclaim() -> None:
            # Files first, read-only: on a disk that is truly full SQLite cannot delete a row
            # (its write-ahead log needs pages) until something else frees room.
            steps = (lambda: delete_expired_values(self._directory, time.time()),
                     self._cache.expire, lambda: sweep_unreferenced(self._directory))
            for step in steps:
                try:
                    step()
                except _ERRORS as exc:
                    self._failures.report("reclaim", exc)

        await asyncio.to_thread(reclaim)

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
