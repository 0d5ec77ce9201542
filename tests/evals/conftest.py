"""Fixtures: small real slices of the in-repo outcome datasets, written like the originals."""

from __future__ import annotations

import gzip
import itertools
import json
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


def write_synthetic(
    dest_dir: Path,
    scores: list[dict[str, float]],
    prices: dict[str, tuple[float, float]],
    extra: dict[str, object] | None = None,
    first_prompt: int = 0,
) -> Path:
    """`data.jsonl` + `models.json` in the RouteLLM format: row i has the real GSM8K prompt
    `first_prompt + i` (in-repo data) and the given `scores`; `prices` are USD per 1M (input,
    output) tokens; every model answers in 10 tokens. `extra` fields are added to every row."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    models = sorted(prices)
    doc = {"models": [
        {"name": m, "price_usd_per_1m_input_tokens": prices[m][0],
         "price_usd_per_1m_output_tokens": prices[m][1],
         "avg_tokens": {"gsm8k": {"few_shot_prefix_tokens": 0, "avg_response_tokens": 10}}}
        for m in models]}
    (dest_dir / "models.json").write_text(json.dumps(doc))
    with gzip.open(ROUTING_DIR / "gsm8k.jsonl.gz", "rt", encoding="utf-8") as src:
        lines_read = itertools.islice(src, first_prompt, first_prompt + len(scores))
        prompts = [json.loads(line) for line in lines_read]
    lines = []
    for i, (source, row_scores) in enumerate(zip(prompts, scores, strict=True)):
        row = {"id": f"gsm8k/{i}", "benchmark": "gsm8k", "category": "gsm8k",
               "prompt": source["prompt"], "prompt_tokens": source["prompt_tokens"],
               "scores": row_scores, "response_tokens": dict.fromkeys(models, 10)}
        lines.append(json.dumps(row | (extra or {})) + "\n")
    dest = dest_dir / "data.jsonl"
    dest.write_text("".join(lines))
    return dest
