"""A corrupt disk-cache database at start-up: the cache starts empty and no cached answer stays
on disk, neither in the database nor in diskcache's value files, whoever opens it first."""

from __future__ import annotations

from pathlib import Path

import diskcache

from cache.backends.disk import DiskResultCache
from cache.entry import CachedEntry, EntryVersions, encode_entry
from cache.metrics import CacheMetrics
from tests.cache.helpers import completion_body

SMALL = b"small-answer-7f3c1e"
LARGE = b"large-answer-9a4d2b"


def _entry(content: bytes) -> CachedEntry:
    return CachedEntry.from_completion(completion_body(content.decode()),
                                       EntryVersions("pv1", "dv1", "m"), created_at=0.0,
                                       generation_s=0.1)


def _files_holding(directory: Path, needle: bytes) -> list[Path]:
    return [path for path in directory.rglob("*") if path.is_file()
            and needle in path.read_bytes()]


async def _fill(directory: Path) -> None:
    """A small answer (a row in cache.db) and one over 32 KiB (a value file) for 600 s."""
    disk = DiskResultCache(directory, CacheMetrics(), offload_set=False)
    assert await disk.set("small", _entry(SMALL), 600.0)
    assert await disk.set("large", _entry(LARGE + b"x" * 40_000), 600.0)
    disk.close()
    assert _files_holding(directory, SMALL) and _files_holding(directory, LARGE)
    assert list(directory.glob("??/??/*.val")), "the large answer is not a value file"


def _corrupt(directory: Path) -> None:
    """Overwrite the SQLite header only: the pages, and the small answer in them, remain."""
    with (directory / "cache.db").open("r+b") as database:
        database.write(b"not a database!\0")


async def test_a_corrupt_database_is_deleted_with_every_answer_it_held(tmp_path: Path) -> None:
    """Reopening over a corrupt cache.db starts empty and leaves no byte of either answer under
    the directory; earlier versions renamed the database to cache.db.corrupt and left the value
    files orphaned, so tenant answers outlived their TTL."""
    directory = tmp_path / "cache"
    await _fill(directory)
    _corrupt(directory)
    disk = DiskResultCache(directory, CacheMetrics(), offload_set=False)
    try:
        assert _files_holding(directory, SMALL) == []
        assert _files_holding(directory, LARGE) == []
        assert disk.corrupt is not None and "not a database" in disk.corrupt
        assert disk.files_deleted >= 2  # cache.db and the large answer's file
        assert await disk.get("small") is None
        assert await disk.set("again", _entry(SMALL), 600.0)
        assert await disk.get("again") == _entry(SMALL)
    finally:
        disk.close()


async def test_files_an_earlier_version_set_aside_are_deleted(tmp_path: Path) -> None:
    """cache.db.corrupt and the value files only it referenced go at the next start; an answer
    of the fresh database stays."""
    directory = tmp_path / "cache"
    await _fill(directory)
    (directory / "cache.db").rename(directory / "cache.db.corrupt")  # as earlier versions did
    kept = b"kept-answer-" + b"k" * 40_000
    with diskcache.Cache(str(directory)) as fresh:  # the earlier version's fresh database
        fresh.set("kept", encode_entry(_entry(kept)), expire=600.0)
    disk = DiskResultCache(directory, CacheMetrics())
    try:
        assert _files_holding(directory, SMALL) == _files_holding(directory, LARGE) == []
        assert disk.corrupt is None and disk.files_deleted == 2  # cache.db.corrupt, a value file
        assert await disk.get("kept") == _entry(kept)
    finally:
        disk.close()

