"""Eval reports as the router reads them: per model × task × metric, a mean with its interval.

`slorouter eval run` writes these JSON files; the router loads them at start-up (their content
hash joins the policy version) and the quality floor compares a model's *lower* bound with the
floor. Nothing here runs an eval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies.labels import Task


class EvalResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    task: Task
    metric: str = "accuracy"
    mean: float = Field(ge=0, le=1)
    n: int = Field(ge=1)
    lower: float = Field(ge=0, le=1)
    upper: float = Field(ge=0, le=1)
    method: str = "wilson"


class EvalReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: str = Field(min_length=1)
    suite_version: str = Field(min_length=1)
    created: str = Field(min_length=1, description="ISO date of the run")
    results: tuple[EvalResult, ...]


class EvalReportError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class QualityTable:
    """Lookup of eval results; later reports win for the same (model, task, metric)."""

    results: Mapping[tuple[str, str, str], EvalResult]
    version: str  # hash of the reports' contents ("none" when there are none)

    def get(self, model: str, task: str, metric: str) -> EvalResult | None:
        return self.results.get((model, task, metric))

    @staticmethod
    def empty() -> QualityTable:
        return QualityTable({}, "none")


def quality_table(reports: Iterable[EvalReport], version: str) -> QualityTable:
    results: dict[tuple[str, str, str], EvalResult] = {}
    for report in reports:
        for result in report.results:
            results[(result.model, result.task, result.metric)] = result
    return QualityTable(results, version)


def load_reports(paths: Iterable[Path]) -> QualityTable:
    """Read and validate report files; the version hashes their bytes in order."""
    digest = hashlib.sha256()
    reports = []
    problems = []
    for path in paths:
        try:
            raw = path.read_bytes()
            reports.append(EvalReport.model_validate_json(raw))
            digest.update(raw)
        except (OSError, ValidationError) as exc:
            problems.append(f"{path}: {exc}")
    if problems:
        raise EvalReportError("; ".join(problems))
    return quality_table(reports, digest.hexdigest()[:12] if reports else "none")
