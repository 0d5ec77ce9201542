"""The code stays lint-clean and strictly typed (DESIGN.md §7: mypy strict and ruff in CI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.procs import VENV_BIN

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing() -> None:
    """`ruff check .` passes on the whole tree (rules in pyproject.toml)."""
    result = subprocess.run([str(VENV_BIN / "ruff"), "check", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_strict_passes_on_the_packages() -> None:
    """`mypy` (strict, per pyproject.toml) passes on router, policies, cache, evals and bench."""
    result = subprocess.run([str(VENV_BIN / "mypy")], cwd=ROOT, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
