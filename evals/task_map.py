"""Which router task each benchmark's prompts are: the labels training and replay fit on.

Online the router asks the learned predictor about the task its classifier (or a hint) gave
the request (`policies.labels.Task`: `math`, `reasoning_analysis`, ...), never a dataset's own
category (an MMLU subject, `math_word_problem`). A predictor fitted on categories meets labels
it never saw and answers from its prompt-shape back-off, so the model that was calibrated and
measured would never run. `train-router` therefore relabels every row with its benchmark's
router task before fitting, and replay does so by default (`--labels category` keeps the
dataset's categories, for comparison only). One task per benchmark, chosen by what it asks;
how often the router's classifier agrees is measured in docs/evals.md. A benchmark with no
entry is an error, never a guess.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from evals.outcomes import OutcomeTable
from policies.labels import Task

Labels = Literal["router", "category"]

ROUTER_TASKS: Final[Mapping[str, Task]] = MappingProxyType(
    {
        "mmlu": "reasoning_analysis",  # as the `mmlu-57` eval suite
        "gsm8k": "math",  # as the `gsm8k-50` eval suite
        "math_level5": "math",
        "cruxeval": "code",  # predict a Python function's output
    }
)


class UnmappedBenchmark(ValueError):
    """Rows of a benchmark with no router task in `ROUTER_TASKS`."""


def router_task(benchmark: str) -> Task:
    """The router task of one benchmark's prompts."""
    task = ROUTER_TASKS.get(benchmark)
    if task is None:
        raise UnmappedBenchmark(
            f"benchmark {benchmark!r} has no router task in evals.task_map.ROUTER_TASKS "
            f"(mapped: {', '.join(sorted(ROUTER_TASKS))})"
        )
    return task


def with_labels(table: OutcomeTable, labels: Labels) -> OutcomeTable:
    """The table with each row's category replaced by its benchmark's router task ("router"),
    or unchanged ("category")."""
    if labels == "category":
        return table
    return dataclasses.replace(table, categories=tuple(router_task(b) for b in table.benchmarks))
