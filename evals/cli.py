"""Command-line entry points of the evals area: `eval replay`, `eval transfer`, `eval run`
(in `evals.run.cli`), `train-router`.

`add_parser` registers `eval` (a group: other `eval ...` commands are added to `EVAL_COMMANDS`
beside `replay`) and `train-router`. Handlers import their heavy modules lazily and return an exit
code (0 ok, 2 bad input).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

EVAL_SUBPARSERS: dict[str, argparse._SubParsersAction[Any]] = {}


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `eval` (with `replay` and `transfer`) and `train-router`."""
    ev = subparsers.add_parser("eval", help="offline evaluation of routing strategies")
    inner = ev.add_subparsers(dest="eval_command", required=True, metavar="EVAL_COMMAND")
    EVAL_SUBPARSERS["eval"] = inner
    _add_replay(inner)
    _add_transfer(inner)
    _add_run(inner)
    _add_train(subparsers)


def _add_floor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--floor", type=float, default=None, help="relative floor, e.g. 0.95")
    p.add_argument("--relative-to", default=None, help="reference model (default: best single)")
    p.add_argument("--z", type=float, default=2.5, help="calibration margin in standard errors")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--folds", type=int, default=5)


def _add_replay(inner: argparse._SubParsersAction[Any]) -> None:
    p = inner.add_parser("replay", help="k-fold cross-validated replay of a routing strategy")
    p.add_argument("--dataset", required=True, type=Path, help="outcome JSONL (.gz ok)")
    p.add_argument("--router", default="learned", choices=("learned", "category", "random"))
    p.add_argument("--benchmark", default=None, help="only rows of this benchmark")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, default=None, help="write the quality-vs-cost curve")
    p.add_argument("--jobs", type=int, default=2, help="parallel folds (two-model replay)")
    p.add_argument(
        "--labels",
        default="router",
        choices=("router", "category"),
        help="task label of each row: its benchmark's router task (what the router passes "
        "online, evals/task_map.py) or the dataset's own category (comparison only)",
    )
    _add_floor_args(p)
    p.set_defaults(func=replay_handler)


def _add_run(inner: argparse._SubParsersAction[Any]) -> None:
    from evals.run.cli import add_run

    add_run(inner)


def _add_transfer(inner: argparse._SubParsersAction[Any]) -> None:
    p = inner.add_parser("transfer", help="train on one two-model dataset, score on another")
    p.add_argument("--train", required=True, type=Path)
    p.add_argument("--test", required=True, type=Path)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--labels",
        default="router",
        choices=("router", "category"),
        help="task label of each row: its benchmark's router task (what the router passes "
        "online, evals/task_map.py) or the dataset's own category (comparison only)",
    )
    p.set_defaults(func=transfer_handler)


def _add_train(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser("train-router", help="train the learned per-request router")
    p.add_argument("--outcomes", required=True, type=Path, help="outcome JSONL (.gz ok)")
    p.add_argument("--out", required=True, type=Path, help="artifact directory")
    p.add_argument("--models", nargs="+", default=None, help="candidates (default: priced ones)")
    p.add_argument("--benchmark", default=None)
    _add_floor_args(p)
    p.set_defaults(func=train_handler, floor=0.95)


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def replay_handler(args: argparse.Namespace) -> int:
    """`slorouter eval replay`."""
    from evals.floor import FloorSpec
    from evals.outcomes import load_rows, load_table
    from evals.routers import FitConfig

    if not args.dataset.exists():
        sys.stderr.write(f"error: no such dataset {args.dataset}\n")
        return 2
    start = time.perf_counter()
    config = FitConfig(router=args.router, seed=args.seed)
    fraction = args.floor if args.floor is not None else 0.95
    spec = FloorSpec(fraction=fraction, reference=args.relative_to, z=args.z)
    benches = sorted({r.benchmark for r in load_rows(args.dataset)})
    if args.benchmark is not None:
        benches = [b for b in benches if b == args.benchmark]
    if not benches:
        sys.stderr.write(f"error: no benchmark {args.benchmark!r} in {args.dataset}\n")
        return 2
    meta: dict[str, Any] = {
        "dataset": str(args.dataset),
        "router": args.router,
        "folds": args.folds,
        "seed": args.seed,
    }
    meta["labels"] = args.labels
    unmapped = _unmapped(benches, args.labels)
    if unmapped:
        sys.stderr.write(unmapped)
        return 2
    if len(benches) == 1 and len(load_table(args.dataset, benchmark=benches[0]).models) == 2:
        _pair_report(args, benches[0], config, spec, meta, start)
    else:
        _multi_report(args, benches, config, spec, meta, start)
    return 0


def _unmapped(benches: list[str], labels: str) -> str:
    """The error for benchmarks with no router task (empty when every one has one)."""
    from evals.task_map import ROUTER_TASKS

    missing = [b for b in benches if b not in ROUTER_TASKS]
    if labels == "category" or not missing:
        return ""
    return (
        f"error: no router task for benchmark(s) {', '.join(missing)} in "
        "evals/task_map.py ROUTER_TASKS (use --labels category to replay on the dataset's "
        "categories)\n"
    )


def _pair_report(
    args: argparse.Namespace,
    bench: str,
    config: Any,
    spec: Any,
    meta: dict[str, Any],
    start: float,
) -> None:
    """Two-model replay (and floor mode with --floor): print, plot."""
    from evals.floor import floor_replay
    from evals.outcomes import load_table
    from evals.replay import pair_replay
    from evals.report import pair_json, pair_text
    from evals.task_map import with_labels

    table = with_labels(load_table(args.dataset, benchmark=bench), args.labels)
    pair = pair_replay(table, config, args.folds, args.relative_to, args.jobs)
    floor = floor_replay(table, spec, config, args.folds, args.seed) if args.floor else None
    meta["seconds"] = time.perf_counter() - start
    if args.plot is not None:
        from evals.plot import plot_pair

        plot_pair(pair, f"{args.dataset.name} ({args.router})", args.plot)
    if args.json:
        _emit(pair_json(pair, floor, meta))
    else:
        header = f"replay {args.dataset} router={args.router} folds={args.folds} seed={args.seed}"
        print(pair_text(pair, floor, header))


def _multi_report(
    args: argparse.Namespace,
    benches: list[str],
    config: Any,
    spec: Any,
    meta: dict[str, Any],
    start: float,
) -> None:
    """N-model replay per benchmark: print, plot."""
    from evals.multi import benchmark_replay
    from evals.outcomes import load_table
    from evals.report import multi_json, multi_text
    from evals.task_map import with_labels

    results = [
        benchmark_replay(
            with_labels(load_table(args.dataset, benchmark=b, priced_only=True), args.labels),
            b,
            spec,
            config,
            args.folds,
            args.seed,
        )
        for b in benches
    ]
    meta["seconds"] = time.perf_counter() - start
    if args.plot is not None:
        from evals.plot import plot_multi

        plot_multi(results, args.plot)
    if args.json:
        _emit(multi_json(results, meta))
    else:
        header = (
            f"replay {args.dataset} folds={args.folds} seed={args.seed} "
            f"floor={spec.fraction} x best single model"
        )
        print(multi_text(results, header))


def transfer_handler(args: argparse.Namespace) -> int:
    """`slorouter eval transfer`."""
    from evals.outcomes import load_table
    from evals.replay import transfer
    from evals.report import curve_json
    from evals.routers import FitConfig
    from evals.task_map import UnmappedBenchmark, with_labels

    try:
        train_table = with_labels(load_table(args.train), args.labels)
        test_table = with_labels(load_table(args.test), args.labels)
    except UnmappedBenchmark as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    if set(train_table.models) != set(test_table.models) or len(test_table.models) != 2:
        sys.stderr.write("error: transfer needs the same two models in both files\n")
        return 2
    summary = transfer(train_table, test_table, FitConfig())
    out = {"train": str(args.train), "test": str(args.test)} | curve_json(summary)
    if args.json:
        _emit(out)
    else:
        print(
            f"train {args.train} -> test {args.test}: APGR {summary.apgr:.4f} "
            f"CPT(50%) {summary.cpt50:.2%} CPT(80%) {summary.cpt80:.2%}"
        )
    return 0


def train_handler(args: argparse.Namespace) -> int:
    """`slorouter train-router`."""
    from evals.floor import FloorSpec
    from evals.task_map import UnmappedBenchmark
    from evals.train_router import TrainRequest, train

    if not args.outcomes.exists():
        sys.stderr.write(f"error: no such outcomes file {args.outcomes}\n")
        return 2
    req = TrainRequest(
        outcomes=args.outcomes,
        out=args.out,
        benchmark=args.benchmark,
        models=tuple(args.models) if args.models else None,
        folds=args.folds,
        seed=args.seed,
        spec=FloorSpec(fraction=args.floor, reference=args.relative_to, z=args.z),
    )
    try:
        version, meta = train(req)
    except UnmappedBenchmark as err:
        sys.stderr.write(f"error: {err}; train-router fits on the labels the router passes\n")
        return 2
    print(f"wrote {args.out} version {version}")
    print(json.dumps(meta["metrics"], indent=2, sort_keys=True))
    return 0
