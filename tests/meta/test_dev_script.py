"""`./dev`: a virtual environment shared by two checkouts runs the calling checkout's code.

The environment is a stand-in whose `pip` and `slorouter` only record how they were called (the
real ones take minutes to install); the script under test is the repository's own `dev`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A copy of the files `./dev` reads, as another checkout would have them."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    for name in ("dev", "pyproject.toml", "requirements.lock"):
        shutil.copy2(ROOT / name, repo / name)
    return repo


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    """An installed environment: a stamp newer than the checkout's files, recording tools."""
    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    for tool in ("pip", "slorouter"):
        script = env / "bin" / tool
        script.write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> "{env}/calls"\n')
        script.chmod(0o755)
    return env


def run_dev(repo: Path, env: Path) -> list[str]:
    result = subprocess.run([str(repo / "dev"), "serve", "--port", "1"], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "SLOROUTER_VENV": str(env)})
    assert result.returncode == 0, result.stderr
    calls = env / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_venv_installed_from_another_checkout_is_pointed_at_this_one(checkout: Path,
                                                                       venv: Path) -> None:
    (venv / ".installed").write_text("/somewhere/else\n")
    assert run_dev(checkout, venv) == ["pip install --quiet --no-deps -e .",
                                       "slorouter serve --port 1"]
    assert (venv / ".installed").read_text().strip() == str(checkout.resolve())


def test_a_venv_installed_from_this_checkout_is_used_as_it_is(checkout: Path,
                                                             venv: Path) -> None:
    (venv / ".installed").write_text(f"{checkout.resolve()}\n")
    assert run_dev(checkout, venv) == ["slorouter serve --port 1"]
