"""Selection check: did the policy keep some requests from an arm's route?

An arm routed to `model:<name>` serves only the requests the policy lets that model serve (its
context window fits, its risk rule and floor allow it, its price is under the cost ceiling).
A barred request is answered by control's route and has no outcome of the arm, while control
keeps its like: when the barred requests differ from the rest (long prompts a small window
refuses), the arm's figures are of an easier mix than control's and every comparison leans
its way. The assignment is still random (the SRM check holds), so only a count of what was
barred shows it. An arm is flagged from `SELECTION_SHARE_LIMIT` of its requests barred: a
share that small moves a mean by at most a few per cent even when the barred requests cost
several times the rest. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

SELECTION_SHARE_LIMIT: Final[float] = 0.01


@dataclass(frozen=True, slots=True)
class SelectionCheck:
    """Per arm: requests barred, requests with an outcome, and the barred share of both."""

    barred: dict[str, int]
    shares: dict[str, float]
    limit: float
    flagged: tuple[str, ...]  # arms compared on a subset of their requests


def selection_check(barred: Mapping[str, int], outcomes: Mapping[str, int],
                    limit: float = SELECTION_SHARE_LIMIT) -> SelectionCheck:
    """The barred share of each arm of `outcomes` (arm → requests with an outcome)."""
    counts = {arm: int(barred.get(arm, 0)) for arm in outcomes}
    shares = {arm: (n / (n + outcomes[arm]) if n + outcomes[arm] else 0.0)
              for arm, n in counts.items()}
    flagged = tuple(arm for arm, share in shares.items() if share >= limit)
    return SelectionCheck(barred=counts, shares=shares, limit=limit, flagged=flagged)
