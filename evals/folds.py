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


SMALL_SAMPLE = 100  # fewer prompts than this: results are printed with a warning


def too_few_groups(groups: int, k: int, inner: int | None = None) -> str | None:
    """Why `groups` distinct prompt groups cannot be split into `k` folds (each fold needs a
    held-out group and a training set), and, with `inner` (floor mode's inner calibration
    folds), why the smallest training set cannot be split into `inner` folds; None if they can."""
    if groups < k:
        fewer = f"use --folds {groups} or fewer, or " if groups >= 2 else "use "
        return (f"{groups} distinct prompt(s) for {k} folds: each fold needs at least one "
                f"held-out prompt ({fewer}more data)")
    if inner is not None:
        smallest_train = groups - -(-groups // k)  # groups minus the largest test fold
        if smallest_train < inner:
            return (f"{groups} distinct prompt(s) leave {smallest_train} in a training fold, "
                    f"fewer than the {inner} inner folds floor-mode calibration needs "
                    "(use more data)")
    return None
