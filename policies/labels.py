"""The classification vocabulary shared by the router, policies, caches and evals.

Only plain literal types and their ordered tuples live here: no behaviour, no imports from the
rest of the project, so every package may depend on it.
"""

from typing import Final, Literal, get_args

Task = Literal[
    "chat",
    "autocomplete",
    "extraction",
    "classification",
    "summarization",
    "translation",
    "code",
    "math",
    "reasoning_analysis",
    "creative_writing",
    "action",
]
Risk = Literal["low", "medium", "high"]
Signal = Literal["pii", "jailbreak", "side_effects", "regulated_domain"]

TASKS: Final[tuple[Task, ...]] = get_args(Task)
RISKS: Final[tuple[Risk, ...]] = get_args(Risk)
SIGNALS: Final[tuple[Signal, ...]] = get_args(Signal)

RISK_ORDER: Final[dict[Risk, int]] = {"low": 0, "medium": 1, "high": 2}


def max_risk(a: Risk, b: Risk) -> Risk:
    """The more careful of two risk levels."""
    return a if RISK_ORDER[a] >= RISK_ORDER[b] else b
