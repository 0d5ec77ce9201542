"""The purge lock of a disk-cache directory that several processes share: a process that found
the database corrupt deletes nothing that another process has recreated meanwhile."""

from __future__ import annotations

import fcntl
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import diskcache

from cache.backends.disk_purge import LOCK_NAME, open_cache


def test_a_database_another_process_recreated_meanwhile_is_kept(tmp_path: Path) -> None:
    """A process that found the database corrupt waits for the purge lock; if another process
    emptied and recreated it meanwhile, it opens that one and deletes nothing."""
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "cache.db").write_bytes(b"not a database!\0" * 4096)
    failed = threading.Event()

    def connect() -> diskcache.Cache:
        try:
            return diskcache.Cache(str(directory))
        except sqlite3.DatabaseError:
            failed.set()
            raise

    with ThreadPoolExecutor(1) as pool, (directory / LOCK_NAME).open("ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other process, emptying the cache
        opening = pool.submit(open_cache, directory, connect)
        assert failed.wait(30)
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (directory / name).unlink(missing_ok=True)
        with diskcache.Cache(str(directory)) as other:
            other.set("other", b"written by the other process")
        fcntl.flock(lock, fcntl.LOCK_UN)
        opened = opening.result(timeout=30)
    try:
        assert opened.corrupt is None and opened.files_deleted == 0
        assert opened.cache.get("other") == b"written by the other process"
    finally:
        opened.cache.close()

