"""Latency of `classifier.classify` by prompt length, on one core: prints p50/p90/p99/max.

Run: `nice python bench/classify_latency.py [--iterations N]`. The process pins itself to one
CPU. Prompts are cut from real test rows (English, and Persian from the GPL-3.0 workload file)
at about 4 characters per token. Also prints the artifact load time and the split between the
rule detectors and the model. Numbers depend on the machine's load: run it on a quiet machine
for figures to compare.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from router.classify import Hints, LinearClassifier, RequestView, load_classifier
from router.classify.classifier import ARTIFACT_DIR
from router.classify.detectors import detect
from router.classify.linear import MODEL_FILE

DATA = Path(__file__).resolve().parent.parent / "evals" / "datasets" / "prompts"
TOKENS = (10, 100, 1000, 4000)


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


def _row(label: str, us: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(us, [50, 90, 99])
    return f"{label:<28} {p50:8.1f} {p90:8.1f} {p99:8.1f} {us.max():9.1f}"


def _classify(clf: LinearClassifier, view: RequestView) -> Callable[[], object]:
    return lambda: clf.classify(view, Hints())


def _detect(view: RequestView) -> Callable[[], object]:
    return lambda: detect(view)


def _score(clf: LinearClassifier, view: RequestView) -> Callable[[], object]:
    return lambda: clf.scores(view)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    t0 = time.perf_counter()
    clf = load_classifier(ARTIFACT_DIR / MODEL_FILE)
    print(f"artifact load: {(time.perf_counter() - t0) * 1000:.1f} ms  version {clf.version[:12]}")
    corpora = {
        "en": _corpus(DATA / "test.jsonl.gz"),
        "fa": _corpus(DATA / "gpl-3.0" / "multilingual_workload.jsonl.gz"),
    }
    print(f"{'microseconds':<28} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>9}")
    for lang, corpus in corpora.items():
        for tokens in TOKENS:
            text = corpus[: tokens * 4]
            view = RequestView(messages=(("system", "You are helpful."), ("user", text)))
            n = args.iterations if tokens <= 1000 else args.iterations // 2
            print(
                _row(
                    f"classify {lang} {tokens:>5} tok",
                    _timings(_classify(clf, view), n),
                )
            )
            if tokens == 4000:
                print(
                    _row(f"  detectors {lang} {tokens} tok", _timings(_detect(view), n))
                )
                print(
                    _row(f"  model {lang} {tokens} tok", _timings(_score(clf, view), n))
                )


if __name__ == "__main__":
    main()
