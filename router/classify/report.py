"""Render an `EvalReport` as Markdown (for `docs/classifier.md`) and as plain JSON values.

Only formatting lives here; the numbers come from `evaluation`.
"""

from __future__ import annotations

from dataclasses import asdict

from policies.labels import RISKS, TASKS
from router.classify.evaluation import ClassScores, EvalReport, Reliability

_SHORT = {
    "chat": "chat",
    "autocomplete": "auto",
    "extraction": "extr",
    "classification": "clsf",
    "summarization": "summ",
    "translation": "trans",
    "code": "code",
    "math": "math",
    "reasoning_analysis": "reas",
    "creative_writing": "crea",
    "action": "act",
}


def _class_table(rows: tuple[ClassScores, ...]) -> list[str]:
    out = ["| label | precision | recall | F1 | support |", "|---|---:|---:|---:|---:|"]
    out += [
        f"| {r.label} | {r.precision:.3f} | {r.recall:.3f} | {r.f1:.3f} | {r.support} |"
        for r in rows
    ]
    return out


def _confusion(matrix: tuple[tuple[int, ...], ...], labels: tuple[str, ...]) -> list[str]:
    names = [_SHORT.get(lab, lab) for lab in labels]
    out = ["| true \\ predicted | " + " | ".join(names) + " |", "|---" + "|---:" * len(names) + "|"]
    out += [
        f"| {names[i]} | " + " | ".join(str(v) for v in row) + " |" for i, row in enumerate(matrix)
    ]
    return out


def _reliability(rel: Reliability) -> list[str]:
    out = [f"ECE = {rel.ece:.4f}", "", "| mean confidence | accuracy | rows |", "|---:|---:|---:|"]
    out += [f"| {c:.3f} | {a:.3f} | {n} |" for c, a, n in rel.bins]
    return out


def markdown(report: EvalReport, title: str) -> str:
    """The full evaluation report as a Markdown section."""
    high = next(r for r in report.risk_per_class if r.label == "high")
    lines = [
        f"### {title}",
        "",
        f"- rows: {report.n}; task macro-F1 **{report.task_macro_f1:.4f}**, "
        f"accuracy {report.task_accuracy:.4f}",
        "- macro-F1 by language: "
        + ", ".join(
            f"{k} {v:.4f} (n={report.n_by_lang[k]})" for k, v in report.macro_f1_by_lang.items()
        ),
        f"- risk `high`: precision **{high.precision:.4f}**, recall **{high.recall:.4f}** "
        f"(n={high.support})",
        f"- PII rows with an e-mail, card or phone flagged: {report.pii_rows_flagged}"
        f"/{report.pii_rows}",
        "",
        "Task, per class:",
        "",
        *_class_table(report.task_per_class),
        "",
        "Task confusion matrix (rows: truth, columns: prediction):",
        "",
        *_confusion(report.task_confusion, TASKS),
        "",
        "Risk, per class:",
        "",
        *_class_table(report.risk_per_class),
        "",
        *_confusion(report.risk_confusion, RISKS),
        "",
        "Calibration of the task probabilities (top label):",
        "",
        *_reliability(report.task_reliability),
        "",
        "Calibration of the risk probabilities (top label of the risk head):",
        "",
        *_reliability(report.risk_reliability),
        "",
    ]
    return "\n".join(lines)


def summary(report: EvalReport) -> dict[str, object]:
    """The headline numbers as JSON-ready values (for the artifact metadata)."""
    high = next(r for r in report.risk_per_class if r.label == "high")
    return {
        "rows": report.n,
        "task_macro_f1": round(report.task_macro_f1, 4),
        "task_accuracy": round(report.task_accuracy, 4),
        "macro_f1_by_lang": {k: round(v, 4) for k, v in report.macro_f1_by_lang.items()},
        "risk_high_precision": round(high.precision, 4),
        "risk_high_recall": round(high.recall, 4),
        "pii_rows_flagged": [report.pii_rows_flagged, report.pii_rows],
        "task_ece": round(report.task_reliability.ece, 4),
        "risk_ece": round(report.risk_reliability.ece, 4),
        "task_per_class": [asdict(c) for c in report.task_per_class],
    }
