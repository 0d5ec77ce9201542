"""Acceptance bench for issue 4: every offline routing number in one run, with timings.

Run: `nice .venv/bin/python bench/replay.py [--seeds 0 1 2] [--json out.json]`. Prints, for the
in-repo RouteLLM MMLU and GSM8K (5-fold, decontaminated): the learned and per-category routers'
APGR/CPT(50%)/CPT(80%) with random and oracle baselines and the wall time of the 14k-prompt
replay; floor mode at 95% of the strong model; cross-benchmark transfer; per ZeroEval benchmark the
per-task floor baseline, the per-request router and the oracle; the predictor's per-request time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.floor import FloorSpec, floor_replay
from evals.multi import benchmark_replay
from evals.outcomes import MULTI_DIR, ROUTING_DIR, OutcomeTable, load_table
from evals.replay import pair_replay, transfer
from evals.report import floor_json, floor_text, multi_text
from evals.routers import FitConfig, RouterName
from evals.task_map import with_labels
from policies.learned.predictor import fit_predictor
from router.cli_types import seed_number

STRONG = "gpt-4-1106-preview"


def pair_numbers(name: str, seeds: list[int], out: dict[str, Any]) -> None:
    """RouteLLM metrics (per seed), the category baseline and floor mode on one benchmark."""
    # Router task labels (what the router passes online); the per-category baseline and one
    # learned run keep the dataset's categories (MMLU subjects), to show what they are worth.
    categories = load_table(ROUTING_DIR / f"{name}.jsonl.gz")
    table = with_labels(categories, "router")
    runs: list[tuple[RouterName, int, OutcomeTable]] = [
        *(("learned", s, table) for s in seeds), ("learned", seeds[0], categories),
        ("category", seeds[0], categories)]
    for router, seed, data in runs:
        start = time.perf_counter()
        rep = pair_replay(data, FitConfig(router=router, seed=seed), 5, STRONG, jobs=2)
        took = time.perf_counter() - start
        r = rep.router
        label = f"{router}/{'router' if data is table else 'category'}-labels"
        print(
            f"{name} {label:<8} seed {seed}: APGR {r.apgr:.4f} CPT(50%) {r.cpt50:.2%} "
            f"CPT(80%) {r.cpt80:.2%} | random {rep.random.apgr:.4f} "
            f"{rep.random.cpt50:.2%} | oracle {rep.oracle.apgr:.4f} "
            f"{rep.oracle.cpt50:.2%} | {len(table)} prompts in {took:.1f} s"
        )
        out[f"{name}/{label}/seed{seed}"] = {
            "apgr": r.apgr,
            "cpt50": r.cpt50,
            "cpt80": r.cpt80,
            "seconds": took,
            "random_apgr": rep.random.apgr,
            "oracle_apgr": rep.oracle.apgr,
            "random_cpt50": rep.random.cpt50,
            "oracle_cpt50": rep.oracle.cpt50,
        }
    start = time.perf_counter()
    floor = floor_replay(table, FloorSpec(0.95, STRONG), FitConfig(), 5, 0)
    print(f"{name} floor mode ({time.perf_counter() - start:.1f} s):")
    print("\n".join("  " + line for line in floor_text(floor)))
    out[f"{name}/floor95"] = floor_json(floor)


def transfer_numbers(out: dict[str, Any]) -> None:
    """Train on one benchmark, score on the other."""
    mmlu, gsm = (
        with_labels(load_table(ROUTING_DIR / f"{n}.jsonl.gz"), "router") for n in ("mmlu", "gsm8k")
    )
    for label, a, b in (("mmlu->gsm8k", mmlu, gsm), ("gsm8k->mmlu", gsm, mmlu)):
        s = transfer(a, b, FitConfig(), STRONG)
        print(f"transfer {label}: APGR {s.apgr:.4f} CPT(50%) {s.cpt50:.2%} CPT(80%) {s.cpt80:.2%}")
        out[f"transfer/{label}"] = {"apgr": s.apgr, "cpt50": s.cpt50, "cpt80": s.cpt80}


def multi_numbers(out: dict[str, Any]) -> None:
    """ZeroEval: per benchmark, strategies side by side at 95% of the best single model."""
    path = MULTI_DIR / "zeroeval_math_code.jsonl.gz"
    for bench in ("gsm8k", "math_level5", "cruxeval"):
        start = time.perf_counter()
        table = with_labels(load_table(path, benchmark=bench, priced_only=True), "router")
        res = benchmark_replay(table, bench, FloorSpec(0.95), FitConfig(), 5, 0)
        print(multi_text([res], f"zeroeval {bench} ({time.perf_counter() - start:.1f} s)"))
        out[f"zeroeval/{bench}"] = {
            s.name: s.__dict__ | {"models": list(s.models)} for s in res.strategies
        } | {"floor": res.floor}


def latency_numbers(out: dict[str, Any]) -> None:
    """Per-request predict time of a predictor trained on all of MMLU."""
    table = with_labels(load_table(ROUTING_DIR / "mmlu.jsonl.gz"), "router")
    predictor = fit_predictor(list(table.texts), list(table.categories), table.scores, table.models)
    texts, tasks = table.texts[:2000], table.categories[:2000]
    start = time.perf_counter()
    for text, task in zip(texts, tasks, strict=True):
        predictor.predict(text, task)
    per = (time.perf_counter() - start) / len(texts)
    times = []
    for text, task in zip(texts[:500], tasks[:500], strict=True):
        t0 = time.perf_counter()
        predictor.predict(text, task)
        times.append(time.perf_counter() - t0)
    p50, p99 = np.percentile(times, [50, 99]) * 1e6
    print(f"predict(): mean {per * 1e6:.0f} us, p50 {p50:.0f} us, p99 {p99:.0f} us per request")
    out["predict_us"] = {"mean": per * 1e6, "p50": p50, "p99": p99}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=seed_number, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for name in ("mmlu", "gsm8k"):
        pair_numbers(name, args.seeds, out)
    transfer_numbers(out)
    multi_numbers(out)
    latency_numbers(out)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2, sort_keys=True, default=float) + "\n")


if __name__ == "__main__":
    main()
