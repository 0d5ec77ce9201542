"""Eval reports as the router reads them: per model × task × metric, a mean with its interval.

`slorouter eval run` writes these JSON files; the router loads them at start-up (their content
hash joins the policy version) and the quality floor compares a model's *lower* bound with the
floor. Nothing here runs an eval. A report is not trusted as written: loading refuses bounds out
of order, a `wilson` bound tighter than Wilson allows for its mean and n, an unknown method, a
`created` that is not ISO 8601 and a (model, task, metric) given twice, listing every problem;
as in configuration files, a boolean is no number (`"n": true` is not 1).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.config_model import ConfigModel
from policies.intervals import wilson_interval
from policies.labels import Task

# `wilson`: what `eval run` writes, checked against its mean and n. `fixture`: a hand-written
# report (the benchmark's), checked for order and range only.
Method = Literal["wilson", "fixture"]
# Written bounds have 6 decimals (mean too): a Wilson bound may differ from the recomputed one by
# rounding, never by more than two units of the last decimal.
WILSON_TOLERANCE = 2e-6


class EvalResult(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    task: Task
    metric: str = "accuracy"
    mean: float = Field(ge=0, le=1)
    # At most a billion: larger is no eval (and 10**309 broke the bound's check with a traceback)
    n: int = Field(ge=1, le=10**9)
    lower: float = Field(ge=0, le=1)
    upper: float = Field(ge=0, le=1)
    method: Method = "wilson"
    # What was evaluated (absent in reports written before `eval run` recorded it): the
    # provider model strings of the logical model's deployments, and the content hash of the
    # suites behind this result (`+`-joined, one per suite).
    provider_models: tuple[str, ...] | None = Field(default=None, min_length=1)
    suite_hash: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> EvalResult:
        if not self.lower <= self.mean <= self.upper:
            raise ValueError(f"bounds out of order: needs lower {self.lower:g} <= mean "
                             f"{self.mean:g} <= upper {self.upper:g}")
        return self


class EvalReport(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: str = Field(min_length=1)
    suite_version: str = Field(min_length=1)
    created: str = Field(min_length=1, description="ISO 8601 date or time of the run")
    results: tuple[EvalResult, ...]

    @field_validator("created")
    @classmethod
    def _iso(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 date or time") from None
        return value


class EvalReportError(ValueError):
    """Report files that cannot back a floor; `problems` lists every one, file first."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


Key = tuple[str, str, str]  # model, task, metric


@dataclass(frozen=True, slots=True)
class QualityTable:
    """Lookup of eval results; later reports win for the same (model, task, metric).

    `refused` holds results that cannot back a floor under the config at hand, with the reason
    (`policies.eval_provenance`); `warnings` what could not be checked."""

    results: Mapping[Key, EvalResult]
    version: str  # hash of the reports' contents ("none" when there are none)
    created: Mapping[Key, datetime] = field(default_factory=dict)  # the result's report's
    refused: Mapping[Key, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # Every report's result per key with its report's date, newest first (a tie: the one listed
    # later first): `results` holds the first, and binding to a config takes the first of them
    # that can back a floor there (`policies.eval_provenance`).
    candidates: Mapping[Key, tuple[tuple[EvalResult, datetime], ...]] = field(
        default_factory=dict)

    def get(self, model: str, task: str, metric: str) -> EvalResult | None:
        return self.results.get((model, task, metric))

    def refusal(self, model: str, task: str, metric: str) -> str | None:
        """Why a report's result for this key was set aside, if it was."""
        return self.refused.get((model, task, metric))

    @staticmethod
    def empty() -> QualityTable:
        return QualityTable({}, "none")


def created_at(text: str) -> datetime:
    """A report's `created` as an aware datetime (a date or a naive time is taken as UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def quality_table(reports: Iterable[EvalReport], version: str) -> QualityTable:
    """Every report's results by (model, task, metric); where several reports hold the same
    key, the most recently `created` one's (a tie: the one listed later). By list order alone,
    an older report listed after a newer one hid the newer result (a passing floor check from
    a result the newer report had failed: the misconfiguration audit of 2026-12-06)."""
    found: dict[Key, list[tuple[int, EvalResult, datetime]]] = {}
    for order, report in enumerate(reports):
        when = created_at(report.created)
        for result in report.results:
            found.setdefault((result.model, result.task, result.metric), []).append(
                (order, result, when))
    candidates = {key: tuple((result, when) for _, result, when in
                             sorted(rows, key=lambda row: (row[2], row[0]), reverse=True))
                  for key, rows in found.items()}
    return QualityTable({key: rows[0][0] for key, rows in candidates.items()}, version,
                        {key: rows[0][1] for key, rows in candidates.items()},
                        candidates=candidates)


def wilson_problem(result: EvalResult) -> str | None:
    """Why a `wilson` result's interval is tighter than Wilson allows for its mean and n."""
    if result.method != "wilson":
        return None
    lower, upper = wilson_interval(result.mean * result.n, result.n)
    found = []
    if result.lower > lower + WILSON_TOLERANCE:
        found.append(f"lower {result.lower:g} is above the Wilson lower bound {lower:.6f}")
    if result.upper < upper - WILSON_TOLERANCE:
        found.append(f"upper {result.upper:g} is below the Wilson upper bound {upper:.6f}")
    if not found:
        return None
    return f"{' and '.join(found)} for mean {result.mean:g} over n={result.n}"


def _row_label(rows: list[Any], index: int) -> str:
    row = rows[index] if index < len(rows) else None
    if not isinstance(row, dict):
        return f"results[{index}]"
    return (f"results[{index}] ({row.get('model')}, {row.get('task')}, "
            f"{row.get('metric', 'accuracy')})")


def _located(error: Any, rows: list[Any]) -> str:
    loc = list(error["loc"])
    where = ""
    if len(loc) >= 2 and loc[0] == "results" and isinstance(loc[1], int):
        where, loc = _row_label(rows, loc[1]), loc[2:]
    field = ".".join(str(p) for p in loc)
    message = str(error["msg"]).removeprefix("Value error, ")
    return ": ".join(part for part in (where, field, message) if part) or message


def report_problems(data: Any) -> tuple[EvalReport | None, list[str]]:
    """Validate a parsed report file: the report when sound, else every problem found (schema,
    bounds, Wilson consistency, duplicate rows), each naming its row."""
    rows = data.get("results") if isinstance(data, dict) else None
    rows = rows if isinstance(rows, list) else []
    problems: list[str] = []
    report = None
    try:
        report = EvalReport.model_validate(data)
    except ValidationError as exc:
        problems += [_located(e, rows) for e in exc.errors()]
    keys: Counter[Key] = Counter()
    first: dict[Key, int] = {}
    for index, row in enumerate(rows):
        try:
            problem = wilson_problem(EvalResult.model_validate(row))
        except ValidationError:
            problem = None  # reported above
        if problem is not None:
            problems.append(f"{_row_label(rows, index)}: {problem}")
        if not isinstance(row, dict):
            continue
        key = (str(row.get("model")), str(row.get("task")), str(row.get("metric", "accuracy")))
        keys[key] += 1
        if keys[key] == 2:
            problems.append(f"{_row_label(rows, index)}: duplicate of results[{first[key]}] "
                            "(one result per model, task and metric)")
        first.setdefault(key, index)
    return (report if not problems else None), problems


def load_reports(paths: Iterable[Path]) -> QualityTable:
    """Read and validate report files; the version hashes their bytes in order. Every problem
    of every file is listed in the one error, each prefixed with its file."""
    digest = hashlib.sha256()
    reports = []
    problems = []
    for path in paths:
        try:
            raw = path.read_bytes()
            data = json.loads(raw)
        except OSError as exc:
            problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        except ValueError as exc:  # JSON syntax, or bytes that are not UTF-8
            problems.append(f"{path}: not JSON: {exc}")
            continue
        report, found = report_problems(data)
        problems += [f"{path}: {problem}" for problem in found]
        if report is not None:
            reports.append(report)
            digest.update(raw)
    if problems:
        raise EvalReportError(problems)
    return quality_table(reports, digest.hexdigest()[:12] if reports else "none")
