"""Writing an artifact's files so that an interrupted write never damages the previous one.

A leaf module (no project imports): the learned router's `save_artifact`, the classifier's
`train_and_write` and `eval run`'s report and details files use it. Each file is first
written in full to a temporary file in the target directory (same file system), with the
permissions the final file has or a new one would get, flushed to disk, and only then renamed
over its final name with `os.replace`, in the order given: the metadata goes last, so the new
metadata never describes an old model. An interruption before the renames leaves the previous
artifact as it was and removes the temporary files.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _mode(target: Path) -> int:
    """The permissions `target` gets: those it has, else what `open` would give a new file
    under the process's umask (a temporary file is created 0600, which a server running as
    another user could not read once renamed into place)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_temp(directory: Path, name: str, data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open only to write and sync
        dir=directory, prefix=f".{name}.", suffix=".tmp", delete=False
    )
    path = Path(handle.name)
    try:
        with handle:
            os.fchmod(handle.fileno(), _mode(directory / name))
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def prepare_directory(directory: Path) -> str | None:
    """Create `directory` for `write_files` before any work is done (so a long training does
    not end in an error), or say why it cannot be written into."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"{directory} is not a directory"
    except OSError as exc:
        return f"cannot create {directory}: {exc.strerror or exc}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable"
    return None


def write_file(path: Path, data: bytes) -> None:
    """Write one file so that a reader sees the old content or the new, never a part."""
    write_files(path.parent, [(path.name, data)])


def write_files(directory: Path, files: Sequence[tuple[str, bytes]]) -> None:
    """Write `files` ((name, content), metadata last) into `directory` (created if missing):
    all of them to temporary files first, then each renamed into place in order."""
    directory.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []
    try:
        for name, data in files:
            temps.append(_write_temp(directory, name, data))
        for (name, _), temp in zip(files, temps, strict=True):
            os.replace(temp, directory / name)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
