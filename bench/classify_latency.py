"""Latency of `classifier.classify` by prompt length, on one core: prints p50/p90/p99/max.

Run: `nice python bench/classify_latency.py [--iterations N] [--runs R]`. The process pins
itself to one CPU. Prompts are cut from real test rows (English, and Persian from the GPL-3.0
workload file) at about 4 characters per token, after a short system prompt. Each length is
timed in `--runs` separate rounds (interleaved with the other lengths, so a burst of load from
other processes hits one round, not one length); the table shows the median over rounds of each
percentile, and `p99 worst` the worst round. At 100 and 4,000 tokens it also prints the stages:
the rule detectors (`detect`: one `scan` of the text shared by PII and jailbreak search, then
the regulated-advice check of the last user message), `visible` (the last user message without
invisible characters: read once, by both the empty-message check and the model) and the model
(`features`: the words of that visible text and the other feature strings, then `predict`: look
up, sum the table rows, softmax). `gc/call` is how many garbage collections ran per `classify`
call. Numbers depend on the machine's load: check `uptime` and compare runs on a quiet machine.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from router.classify import Hints, LinearClassifier, RequestView, load_classifier
from router.classify.classifier import ARTIFACT_DIR
from router.classify.detectors import (
    detect,
    is_regulated_advice,
    jailbreak_phrase,
    visible_text,
)
from router.classify.features import feature_parts
from router.classify.linear import MODEL_FILE
from router.classify.pii import pii_kinds
from router.classify.scan import scan

DATA = Path(__file__).resolve().parent.parent / "evals" / "datasets" / "prompts"
TOKENS = (10, 100, 1000, 4000)
STAGE_TOKENS = (100, 4000)
SYSTEM = "You are helpful."


def _corpus(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return "\n".join(json.loads(line)["text"] for line in fh)


def _timings(fn: Callable[[], object], n: int) -> np.ndarray:
    for _ in range(min(50, n)):
        fn()
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out[i] = (time.perf_counter_ns() - t0) / 1000.0
    return out


class _GcCount:
    """Counts garbage collections (all generations) while it is installed."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self.n += 1


def _stages(clf: LinearClassifier, view: RequestView) -> dict[str, Callable[[], object]]:
    everything = "\n".join(text for _, text in view.messages)
    user = view.messages[-1][1]
    scanned = scan(everything)
    text = visible_text(view)
    shown = text.last_user
    words, others = feature_parts(view, clf.model.config, shown)
    return {
        "detect": lambda: detect(view, text),
        "  scan": lambda: scan(everything),
        "  pii": lambda: pii_kinds(everything, scanned),
        "  jailbreak": lambda: jailbreak_phrase(everything, scanned),
        "  advice": lambda: is_regulated_advice(user),
        "visible": lambda: visible_text(view),
        "model": lambda: clf.scores(view, shown),
        "  features": lambda: feature_parts(view, clf.model.config, shown),
        "  predict": lambda: clf.model.predict_parts(words, others),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=1000, help="calls per length per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    t0 = time.perf_counter()
    clf = load_classifier(ARTIFACT_DIR / MODEL_FILE)
    print(
        f"artifact load: {(time.perf_counter() - t0) * 1000:.1f} ms  version {clf.version[:12]}"
        f"  load average {os.getloadavg()[0]:.2f}"
    )
    corpora = {
        "en": _corpus(DATA / "test.jsonl.gz"),
        "fa": _corpus(DATA / "gpl-3.0" / "multilingual_workload.jsonl.gz"),
    }
    views = {
        (lang, tokens): RequestView(messages=(("system", SYSTEM), ("user", text[: tokens * 4])))
        for lang, text in corpora.items()
        for tokens in TOKENS
    }
    counter = _GcCount()
    rows: dict[str, list[np.ndarray]] = {}
    gcs: dict[str, int] = {}
    for _ in range(args.runs):
        for (lang, tokens), view in views.items():
            label = f"classify {lang} {tokens:>5} tok"
            gc.callbacks.append(counter)
            before = counter.n
            us = _timings(lambda view=view: clf.classify(view, Hints()), args.iterations)  # type: ignore[misc]
            gc.callbacks.remove(counter)
            gcs[label] = gcs.get(label, 0) + counter.n - before
            rows.setdefault(label, []).append(us)
            if tokens in STAGE_TOKENS:
                for stage, fn in _stages(clf, view).items():
                    rows.setdefault(f"  {stage} {lang} {tokens}", []).append(
                        _timings(fn, args.iterations // 2)
                    )
    print(f"median of {args.runs} runs; microseconds")
    print(f"{'':<28} {'p50':>8} {'p90':>8} {'p99':>8} {'p99 worst':>10} {'max':>9} {'gc/call':>8}")
    for label, runs in rows.items():
        pct = np.array([np.percentile(us, [50, 90, 99]) for us in runs])
        p50, p90, p99 = np.median(pct, axis=0)
        worst = pct[:, 2].max()
        top = max(us.max() for us in runs)
        calls = sum(len(us) + min(50, len(us)) for us in runs)
        per = f"{gcs[label] / calls:8.3f}" if label in gcs else ""
        print(f"{label:<28} {p50:8.1f} {p90:8.1f} {p99:8.1f} {worst:10.1f} {top:9.1f} {per}")


if __name__ == "__main__":
    main()
