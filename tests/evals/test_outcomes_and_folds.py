"""Loading real outcome rows: decontamination, costs, grouping, and group-respecting folds."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np

from evals.folds import fold_ids, inner_split, splits
from evals.outcomes import group_key, load_rows, load_table


def _raw(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_decontamination_drops_exactly_marked_rows(gsm8k_slice: Path) -> None:
    """Rows marked contaminated are dropped, the rest kept in file order."""
    raw = _raw(gsm8k_slice)
    kept = [r["id"] for r in raw if not r["contaminated"]]
    assert [r.id for r in load_rows(gsm8k_slice)] == kept
    assert len(load_rows(gsm8k_slice, decontaminate=False)) == len(raw)


def test_two_model_costs_follow_prices(gsm8k_slice: Path) -> None:
    """Strong-model cost per prompt exceeds the weak model's, from models.json prices."""
    table = load_table(gsm8k_slice)
    s, w = table.column("gpt-4-1106-preview"), 1 - table.column("gpt-4-1106-preview")
    assert np.all(table.costs[:, s] > table.costs[:, w])
    assert np.isclose(
        table.scores.mean(axis=0)[s],
        np.mean([r.scores["gpt-4-1106-preview"] for r in load_rows(gsm8k_slice)]),
    )


def test_multi_model_priced_table_has_costs_everywhere(crux_slice: Path) -> None:
    """With priced_only, every candidate has a finite cost on every row."""
    table = load_table(crux_slice, benchmark="cruxeval", priced_only=True)
    assert len(table.models) > 10
    assert np.all(np.isfinite(table.costs)) and np.all(table.costs > 0)


def test_same_passage_shares_group_key() -> None:
    """Two questions on one reading passage share a key; different texts do not."""
    head = "This question refers to the following information.\nA passage.\n"
    assert group_key(head + "Q1?\nA. x\nAnswer:") == group_key(head + "Q2?\nA. y\nAnswer:")
    assert group_key("What is 2+2?") != group_key("What is 3+3?")


def test_folds_never_split_a_group(mmlu_slice: Path) -> None:
    """Every group lands in exactly one fold, and the same seed gives the same folds."""
    table = load_table(mmlu_slice)
    groups = list(table.groups) + list(table.groups[:20])  # force duplicated groups
    folds = fold_ids(groups, 5, np.random.default_rng(0))
    seen: dict[str, set[int]] = {}
    for g, f in zip(groups, folds, strict=True):
        seen.setdefault(g, set()).add(int(f))
    assert all(len(v) == 1 for v in seen.values())
    assert np.array_equal(folds, fold_ids(groups, 5, np.random.default_rng(0)))
    sizes = Counter(folds.tolist())
    assert max(sizes.values()) - min(sizes.values()) <= 0.2 * len(groups)


def test_splits_partition_rows_and_inner_split_stays_inside() -> None:
    """Train/test of each fold partition the rows; the inner split is a partition of train."""
    groups = [f"g{i % 37}" for i in range(200)]
    folds = fold_ids(groups, 4, np.random.default_rng(1))
    for train, test in splits(folds, 4):
        assert sorted(np.concatenate([train, test]).tolist()) == list(range(200))
        fit, cal = inner_split(groups, train, 0.25, np.random.default_rng(2))
        assert sorted(np.concatenate([fit, cal]).tolist()) == sorted(train.tolist())
        assert not {groups[i] for i in fit} & {groups[i] for i in cal}
