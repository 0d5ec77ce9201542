"""The disk cache through what happens to its directory while the router runs: removed by an
operator clearing the cache, or its disk full. Real diskcache and SQLite."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cache.backends import disk as disk_module
from cache.backends.disk import DiskResultCache
from cache.entry import CachedEntry, EntryVersions
from cache.metrics import CacheMetrics
from tests.cache.helpers import completion_body


def _entry(content: str) -> CachedEntry:
    return CachedEntry.from_completion(completion_body(content), EntryVersions("pv1", "dv1", "m"),
                                       created_at=0.0, generation_s=0.1)


async def test_a_directory_removed_while_running_is_made_again_private(tmp_path: Path) -> None:
    """`rm -rf` of the directory (clearing the cache): diskcache recreated it under the umask
    (0755, answers in 0644 files readable by every local user) and kept writing rows into the
    deleted database, so the new files outlived their TTL. Now the cache is opened afresh in a
    private directory, and what it stores is found there after a restart."""
    directory = tmp_path / "cache"
    disk = DiskResultCache(directory, CacheMetrics(), offload_set=False)
    assert await disk.set("before", _entry("small"), 600.0)
    shutil.rmtree(directory)
    umask = os.umask(0o022)
    try:
        assert await disk.set("after", _entry("large " + "x" * 40_000), 600.0)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert disk.reopened == 1
    assert await disk.get("before") is None
    assert await disk.get("after") is not None
    disk.close()
    again = DiskResultCache(directory, CacheMetrics(), offload_set=False)
    try:
        assert await again.get("after") is not None  # its file has its row: no orphan
    finally:
        again.close()


async def test_a_full_disk_reclaims_its_expired_entries_and_says_it_is_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own `database or disk is full` (a page limit stands in for the disk): diskcache
    culls expired entries inside the write that fails, so a full cache stayed full after every
    entry had expired. A failing write now reclaims them; `degraded()` says so until a write
    succeeds."""
    monkeypatch.setattr(disk_module, "RECLAIM_INTERVAL_S", 0.0)
    disk = DiskResultCache(tmp_path / "cache", CacheMetrics(), offload_set=False)
    try:
        disk._cache.reset("sqlite_max_page_count", 40)  # this connection's: writes are inline
        stored = 0
        while await disk.set(f"k{stored}", _entry("y" * 3000), 0.3):
            stored += 1
            assert stored < 1000, "the page limit never filled the database"
        assert stored > 0
        assert disk.degraded() is not None and "disk full" in (disk.degraded() or "")
        await asyncio.sleep(0.4)  # every entry expired
        await disk.set("reclaiming", _entry("y" * 3000), 600.0)  # fails, and reclaims
        assert await disk.set("fits", _entry("y" * 3000), 600.0)
        assert disk.degraded() is None
        assert await disk.get("fits") is not None
    finally:
        disk.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs of its own (root only: skipped where mounting is not allowed)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def test_a_disk_truly_full_frees_expired_answers_files_first(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a filesystem with no byte left SQLite cannot even delete a row (its write-ahead log
    needs pages), so reclaiming by `expire` alone never freed anything (an audit: full for good,
    every entry expired). The expired answers' files go first, read-only."""
    monkeypatch.setattr(disk_module, "RECLAIM_INTERVAL_S", 0.0)
    disk = DiskResultCache(small_disk / "cache", CacheMetrics(), offload_set=False)
    try:
        stored = 0
        while await disk.set(f"k{stored}", _entry("large " + "x" * 40_000), 0.3):
            stored += 1
            assert stored < 100, "a 1 MB disk held 100 answers of 40 KB"
        assert stored > 0 and disk.degraded() is not None
        await asyncio.sleep(0.4)  # every answer expired
        await disk.set("reclaiming", _entry("large " + "x" * 40_000), 600.0)
        assert await disk.set("fits", _entry("large " + "y" * 40_000), 600.0)
        assert disk.degraded() is None
        assert await disk.get("fits") is not None
    finally:
        disk.close()
