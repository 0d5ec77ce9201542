"""From graded outcomes to the `EvalReport` the router reads, plus a readable run summary.

Per logical model x task x metric: the mean score, n (failed calls count as failures, so n is
the number of items sent), and the Wilson 95 % score interval, written to 6 decimals
rounded outward (lower down, upper up). Pure: the run's date comes in.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from evals.metrics import wilson_interval
from evals.run.runner import Outcome
from evals.run.suite import Suite, suite_hash
from policies.eval_report import EvalReport, EvalResult

Key = tuple[str, str, str]  # model, task, metric


@dataclass(frozen=True, slots=True)
class Cell:
    """One model x task x metric of a run, with its failed calls by kind."""

    model: str
    task: str
    metric: str
    mean: float
    n: int
    lower: float
    upper: float
    errors: dict[str, int]
    suites: tuple[str, ...] = ()  # the suites whose items it pools, first-seen order


def cells(outcomes: Iterable[Outcome]) -> list[Cell]:
    """Aggregate outcomes per (model, task, metric), in first-seen order."""
    groups: dict[Key, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[(outcome.model, outcome.task, outcome.metric)].append(outcome)
    found = []
    for (model, task, metric), group in groups.items():
        total = sum(o.score for o in group)
        lower, upper = wilson_interval(total, len(group))
        errors = Counter(o.error for o in group if o.error is not None)
        suites = tuple(dict.fromkeys(o.suite for o in group))
        found.append(Cell(model, task, metric, total / len(group), len(group), lower, upper,
                          dict(sorted(errors.items())), suites))
    return found


def failed_calls(cell: Cell) -> int:
    """The calls of `cell` that failed (error, timeout, no text, a judge failing or
    unparseable): each scored 0."""
    return sum(cell.errors.values())


def over_error_rate(found: Sequence[Cell], max_rate: float) -> list[Cell]:
    """The report rows whose share of failed calls exceeds `max_rate`. A failed call scores 0,
    so each one lowers its row's mean by 1/n: past a few percent the row measures the
    deployment's failures (a rate limit, an outage) more than the model's quality, and a floor
    set on it says the model is worse than it is. Per row, not over the run: one model failing
    every call among twenty healthy ones is 5 % of the run and all of its own rows. The share
    is compared, not `max_rate x n` (0.29 x 100 is 28.999999999999996 in floats, which refused
    29 failures of 100 at --max-error-rate 0.29)."""
    return [c for c in found if failed_calls(c) / max(c.n, 1) > max_rate]


def suite_label(suites: Sequence[Suite]) -> tuple[str, str]:
    """The report's suite name and version: one suite's own, or several joined by `+`."""
    return "+".join(s.name for s in suites), "+".join(s.version for s in suites)


def _down(bound: float) -> float:
    """A lower bound to 6 decimals, rounded down: never up onto a floor."""
    return math.floor(bound * 1e6) / 1e6


def _up(bound: float) -> float:
    """An upper bound to 6 decimals, rounded up."""
    return math.ceil(bound * 1e6) / 1e6


def build_report(suites: Sequence[Suite], found: Sequence[Cell], created: str,
                 provider_models: Mapping[str, Sequence[str]]) -> EvalReport:
    """The report; each result records the provider model strings of its logical model's
    deployments (`provider_models`, by logical model) and the content hash of its suites."""
    name, version = suite_label(suites)
    hashes = {s.name: suite_hash(s) for s in suites}
    results = tuple(
        EvalResult.model_validate({
            "model": c.model, "task": c.task, "metric": c.metric, "mean": round(c.mean, 6),
            "n": c.n, "lower": _down(c.lower), "upper": _up(c.upper), "method": "wilson",
            "provider_models": sorted(set(provider_models[c.model])),
            "suite_hash": "+".join(hashes[s] for s in c.suites) or None,
        })
        for c in found)
    return EvalReport(suite=name, suite_version=version, created=created, results=results)


def summary_text(found: Sequence[Cell]) -> str:
    """A table: model, task, mean with its interval, n, failed calls."""
    lines = [f"{'model':<16} {'task':<20} {'mean':>6} {'95% Wilson':>15} {'n':>5}  errors"]
    for c in found:
        errors = ", ".join(f"{k} {v}" for k, v in c.errors.items()) or "-"
        lines.append(f"{c.model:<16} {c.task:<20} {c.mean:>6.3f} "
                     f"[{c.lower:.3f}, {c.upper:.3f}] {c.n:>5}  {errors}")
    return "\n".join(lines)


def details_jsonl(outcomes: Iterable[Outcome]) -> str:
    """One JSON line per graded item (for debugging a suite or a grader)."""
    return "".join(json.dumps(asdict(o), ensure_ascii=False) + "\n" for o in outcomes)
