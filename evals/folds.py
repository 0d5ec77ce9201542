"""Group k-fold splits: rows sharing a text or a reading passage never straddle train and test.

Pure: the fold of each group comes from a permutation drawn from the injected numpy Generator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def fold_ids(groups: Sequence[str], k: int, rng: np.random.Generator) -> IntArray:
    """Fold number (0..k-1) per row; groups dealt round-robin in a random order."""
    if k < 2:
        raise ValueError(f"need at least 2 folds, got {k}")
    unique = sorted(set(groups))
    order = rng.permutation(len(unique))
    fold_of = {unique[int(j)]: pos % k for pos, j in enumerate(order)}
    return np.array([fold_of[g] for g in groups], dtype=np.int64)


def splits(folds: IntArray, k: int) -> list[tuple[IntArray, IntArray]]:
    """(train index, test index) for each fold, indices in row order."""
    return [
        (np.flatnonzero(folds != f).astype(np.int64), np.flatnonzero(folds == f).astype(np.int64))
        for f in range(k)
    ]


def inner_split(
    groups: Sequence[str], index: IntArray, share: float, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Split `index` by group into (fit, calibration) with about `share` of groups calibrating."""
    sub = [groups[int(i)] for i in index]
    unique = sorted(set(sub))
    chosen = set(rng.permutation(len(unique))[: max(1, round(share * len(unique)))].tolist())
    held = {unique[j] for j in chosen}
    mask = np.array([g in held for g in sub])
    return index[~mask], index[mask]
