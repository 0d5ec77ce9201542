"""Measure a classifier on labelled examples: the numbers the acceptance criteria name.

Task macro-F1 (overall and per language), per-class precision/recall, confusion matrices, risk
`high` precision/recall, PII rows flagged, and calibration (expected calibration error and
reliability bins of the top label). Everything goes through `Classifier.classify`, so what is
measured is what the service serves. Rendering the report lives in `report`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support

from policies.labels import RISKS, TASKS
from router.classify.data import Example
from router.classify.pii import pii_kinds
from router.classify.types import Classifier, Hints, Labels

K = TypeVar("K", bound=str)


@dataclass(frozen=True, slots=True)
class ClassScores:
    """Precision, recall, F1 and support of one label."""

    label: str
    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True, slots=True)
class Reliability:
    """Calibration of the top label: ECE and (mean confidence, accuracy, count) per bin."""

    ece: float
    bins: tuple[tuple[float, float, int], ...]


@dataclass(frozen=True)
class EvalReport:
    """Every number of one evaluation run."""

    n: int
    task_macro_f1: float
    task_accuracy: float
    task_per_class: tuple[ClassScores, ...]
    task_confusion: tuple[tuple[int, ...], ...]
    macro_f1_by_lang: dict[str, float]
    n_by_lang: dict[str, int]
    risk_per_class: tuple[ClassScores, ...]
    risk_confusion: tuple[tuple[int, ...], ...]
    pii_rows: int
    pii_rows_flagged: int
    task_reliability: Reliability
    risk_reliability: Reliability


def reliability(
    confidence: npt.NDArray[np.float64], correct: npt.NDArray[np.bool_], n_bins: int = 10
) -> Reliability:
    """Expected calibration error over equal-width confidence bins, and the bins."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, n_bins - 1)
    bins: list[tuple[float, float, int]] = []
    ece = 0.0
    for b in range(n_bins):
        mask = which == b
        count = int(mask.sum())
        if count == 0:
            continue
        conf, acc = float(confidence[mask].mean()), float(correct[mask].mean())
        ece += count / len(confidence) * abs(conf - acc)
        bins.append((conf, acc, count))
    return Reliability(ece=ece, bins=tuple(bins))


def _per_class(y: list[str], p: list[str], labels: Sequence[str]) -> tuple[ClassScores, ...]:
    prec, rec, f1, sup = precision_recall_fscore_support(y, p, labels=list(labels), zero_division=0)
    return tuple(
        ClassScores(lab, float(prec[i]), float(rec[i]), float(f1[i]), int(sup[i]))
        for i, lab in enumerate(labels)
    )


def _macro_f1(y: list[str], p: list[str]) -> float:
    present = sorted(set(y))
    return float(f1_score(y, p, labels=present, average="macro", zero_division=0))


def _top_reliability(probs: list[dict[str, float]], truth: list[str]) -> Reliability:
    conf = np.array([max(d.values()) for d in probs])
    correct = np.array([max(d, key=d.__getitem__) == t for d, t in zip(probs, truth, strict=True)])
    return reliability(conf, correct)


def _probs(probs: Mapping[K, float]) -> dict[str, float]:
    return {str(k): float(v) for k, v in probs.items()}


def evaluate(classifier: Classifier, examples: Sequence[Example]) -> EvalReport:
    """Classify every example without hints and score the labels against the truth."""
    labels: list[Labels] = [classifier.classify(e.view, Hints()) for e in examples]
    y_task: list[str] = [e.task for e in examples]
    p_task: list[str] = [lab.task for lab in labels]
    y_risk: list[str] = [e.risk for e in examples]
    p_risk: list[str] = [lab.risk for lab in labels]
    langs = sorted({e.lang for e in examples})
    by_lang: dict[str, float] = {}
    n_by_lang: dict[str, int] = {}
    groups = {lang: [lang] for lang in langs}
    if "fa" in langs or "mixed" in langs:
        groups["fa+mixed"] = [g for g in ("fa", "mixed") if g in langs]
    for name, members in groups.items():
        idx = [i for i, e in enumerate(examples) if e.lang in members]
        by_lang[name] = _macro_f1([y_task[i] for i in idx], [p_task[i] for i in idx])
        n_by_lang[name] = len(idx)
    strong_pii = [
        i
        for i, e in enumerate(examples)
        if e.pii and pii_kinds(e.view.messages[-1][1]) & {"email", "card", "phone"}
    ]
    return EvalReport(
        n=len(examples),
        task_macro_f1=_macro_f1(y_task, p_task),
        task_accuracy=float(np.mean([a == b for a, b in zip(y_task, p_task, strict=True)])),
        task_per_class=_per_class(y_task, p_task, TASKS),
        task_confusion=tuple(map(tuple, confusion_matrix(y_task, p_task, labels=list(TASKS)))),
        macro_f1_by_lang=by_lang,
        n_by_lang=n_by_lang,
        risk_per_class=_per_class(y_risk, p_risk, RISKS),
        risk_confusion=tuple(map(tuple, confusion_matrix(y_risk, p_risk, labels=list(RISKS)))),
        pii_rows=len(strong_pii),
        pii_rows_flagged=sum("pii" in labels[i].signals for i in strong_pii),
        task_reliability=_top_reliability([_probs(lab.task_probs) for lab in labels], y_task),
        risk_reliability=_top_reliability([_probs(lab.risk_probs) for lab in labels], y_risk),
    )
