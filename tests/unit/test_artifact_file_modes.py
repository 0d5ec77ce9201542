"""Files written through `policies.files` (learned router and classifier artifacts, eval
reports) get the permissions a plain write gives, not the temporary file's 0600."""

from __future__ import annotations

import os
from pathlib import Path

from policies import files


def test_new_files_get_the_mode_a_plain_write_gives(tmp_path: Path) -> None:
    """A server running as another user can read an artifact a training job wrote."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    files.write_files(tmp_path, [("router.joblib", b"model"), ("metadata.json", b"{}")])
    for name in ("router.joblib", "metadata.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    """An operator's chmod on the report (group-readable only, say) survives a rewrite."""
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    files.write_files(tmp_path, [("report.json", b"new")])
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
