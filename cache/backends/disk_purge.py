"""Opening a diskcache directory, deleting a corrupt database and every answer it held.

Cached answers are tenant content with a TTL, so nothing is kept "for a post-mortem": when the
database (`cache.db`) cannot be read, it is deleted with its WAL files, and so is every value
file (answers over 32 KiB, kept beside the database in `xx/yy/*.val`) that the fresh database
does not reference. The `cache.db*.corrupt` files that earlier versions set aside are deleted the
same way, with the value files only they referenced.

Several processes may share the directory: the deleting happens under an exclusive lock on
`purge.lock` in the directory, and a process first retries the open under that lock, so a
database that another process has just emptied and recreated is used, never deleted. An
`OperationalError` (a directory or database it cannot open or write) is raised, not fixed.

What does not live here: serving the cache (`cache.backends.disk`).
"""

from __future__ import annotations

import fcntl
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import diskcache

LOCK_NAME = "purge.lock"
# The WAL first: it must not outlive its database, or SQLite would replay it into the next one.
_DATABASE = tuple(f"{diskcache.core.DBNAME}{suffix}" for suffix in ("-wal", "-shm", ""))
_SET_ASIDE = tuple(f"{name}.corrupt" for name in _DATABASE)  # by versions before this module
_VALUE_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val")  # `Disk.filename`


@dataclass(frozen=True)
class Opened:
    """An open cache, and what opening it deleted."""

    cache: diskcache.Cache
    corrupt: str | None  # the SQLite error for which this process deleted the database
    files_deleted: int


def open_cache(directory: Path, connect: Callable[[], diskcache.Cache]) -> Opened:
    """`connect()`, deleting first a corrupt database and, after, any content it left."""
    try:
        cache = connect()
    except sqlite3.OperationalError:  # cannot open or write: not ours to fix
        raise
    except sqlite3.DatabaseError as exc:  # not a database, malformed: corrupt
        return _reopen_emptied(directory, connect, str(exc))
    if not any((directory / name).exists() for name in _SET_ASIDE):
        return Opened(cache, None, 0)
    with _exclusive(directory):
        return Opened(cache, None, _delete_unreferenced(directory))


def _reopen_emptied(directory: Path, connect: Callable[[], diskcache.Cache],
                    error: str) -> Opened:
    with _exclusive(directory):
        try:
            return Opened(connect(), None, 0)  # another process emptied it first
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            pass  # still corrupt: this process empties it
        deleted = _delete(directory, _DATABASE)
        cache = connect()
        return Opened(cache, error, deleted + _delete_unreferenced(directory))


@contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """Hold the directory's purge lock; it is released when the file closes (or the process
    dies)."""
    with (directory / LOCK_NAME).open("ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def delete_expired_values(directory: Path, now: float) -> int:
    """Delete the value files of entries expired by `now` (wall-clock seconds, as diskcache's
    `expire_time`), reading the database without writing to it: on a full disk SQLite cannot
    delete a row (its write-ahead log needs pages), but unlinking the answers' files frees room.
    Their rows, expired, read as misses (a row whose file is gone too) until `expire` deletes
    them. How many files went."""
    with _read_only(directory) as connection:
        rows = connection.execute(
            "SELECT filename FROM Cache WHERE filename IS NOT NULL AND expire_time IS NOT NULL"
            " AND expire_time < ?", (now,)).fetchall()
    names = tuple(str(row[0]) for row in rows if _VALUE_FILE.fullmatch(str(row[0])))
    return _delete(directory, names)


def sweep_unreferenced(directory: Path) -> int:
    """Delete, under the purge lock, every value file the database does not reference (a
    write that failed on a full disk leaves its file behind): how many went."""
    with _exclusive(directory):
        return _delete_unreferenced(directory)


def _delete_unreferenced(directory: Path) -> int:
    """Delete the set-aside databases and every value file the open database does not reference.
    A value file written by another process in the instant before its row is committed may go
    too: that entry is then a miss."""
    referenced = _referenced(directory)
    names = (path.relative_to(directory).as_posix() for path in directory.glob("??/??/*.val"))
    orphans = tuple(name for name in names
                    if _VALUE_FILE.fullmatch(name) and name not in referenced)
    return _delete(directory, _SET_ASIDE) + _delete(directory, orphans)


def _referenced(directory: Path) -> frozenset[str]:
    with _read_only(directory) as connection:
        rows = connection.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL")
        return frozenset(str(row[0]) for row in rows)


def _read_only(directory: Path) -> closing[sqlite3.Connection]:
    """The directory's database opened for reading only (nothing written, not even a journal)."""
    database = (directory / diskcache.core.DBNAME).as_uri()
    return closing(sqlite3.connect(f"{database}?mode=ro", uri=True))


def _delete(directory: Path, names: tuple[str, ...]) -> int:
    """Delete `names` in `directory`: how many were there (another process may be first)."""
    deleted = 0
    for name in names:
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            continue
        deleted += 1
    return deleted
