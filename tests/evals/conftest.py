"""Fixtures: small real slices of the in-repo outcome datasets, written like the originals."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from evals.outcomes import MULTI_DIR, ROUTING_DIR


def write_slice(source: Path, dest_dir: Path, every: int, keep: str | None = None) -> Path:
    """Every `every`-th line of `source` (optionally only lines containing `keep`) + models.json."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(source.parent / "models.json", dest_dir / "models.json")
    dest = dest_dir / source.name
    with gzip.open(source, "rt", encoding="utf-8") as src, gzip.open(dest, "wt") as out:
        lines = [line for line in src if keep is None or keep in line]
        out.writelines(lines[::every])
    return dest


@pytest.fixture(scope="session")
def mmlu_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 470 real MMLU rows spread over all subjects."""
    return write_slice(ROUTING_DIR / "mmlu.jsonl.gz", tmp_path_factory.mktemp("mmlu"), 30)


@pytest.fixture(scope="session")
def gsm8k_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 440 real GSM8K rows (every third)."""
    return write_slice(ROUTING_DIR / "gsm8k.jsonl.gz", tmp_path_factory.mktemp("gsm8k"), 3)


@pytest.fixture(scope="session")
def crux_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 270 real ZeroEval CRUXEval rows (every third)."""
    return write_slice(
        MULTI_DIR / "zeroeval_math_code.jsonl.gz",
        tmp_path_factory.mktemp("crux"),
        3,
        keep='"benchmark": "cruxeval"',
    )
