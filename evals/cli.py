"""Command-line entry points of the evals area: `eval replay`, `eval transfer`, `eval run`
(in `evals.run.cli`), `train-router`.

`add_parser` registers `eval` (a group: other `eval ...` commands are added to `EVAL_COMMANDS`
beside `replay`) and `train-router`. Handlers import their heavy modules lazily and return an exit
code (0 ok, 2 bad input).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evals.task_map import UnmappedBenchmark

if TYPE_CHECKING:  # the tables are loaded lazily (numpy, scikit-learn): a command's help stays fast
    from evals.outcomes import OutcomeTable

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


def _fraction(text: str) -> float:
    """A relative floor: a fraction of the reference's quality in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]: a floor is a fraction of "
                                         "the reference's quality, e.g. 0.95")
    return value


def _positive(text: str) -> float:
    """A finite number above 0 (the calibration margin in standard errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number above 0, e.g. 2.5")
    return value


def _at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


def _add_floor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--floor", type=_fraction, default=None,
                   help="relative floor in (0, 1], e.g. 0.95")
    p.add_argument("--relative-to", default=None, help="reference model (default: best single)")
    p.add_argument("--z", type=_positive, default=2.5,
                   help="calibration margin in standard errors (> 0)")
    p.add_argument("--seed", type=_at_least(0), default=0,
                   help="random seed of the folds (an integer >= 0)")
    p.add_argument("--folds", type=_at_least(2), default=5, help="cross-validation folds (>= 2)")


def _add_replay(inner: argparse._SubParsersAction[Any]) -> None:
    p = inner.add_parser("replay", help="k-fold cross-validated replay of a routing strategy")
    p.add_argument("--dataset", required=True, type=Path, help="outcome JSONL (.gz ok)")
    p.add_argument("--router", default="learned", choices=("learned", "category", "random"))
    p.add_argument("--benchmark", default=None, help="only rows of this benchmark")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, default=None, help="write the quality-vs-cost curve")
    p.add_argument("--jobs", type=_at_least(1), default=2,
                   help="parallel folds (two-model replay)")
    _add_labels_arg(p)
    _add_floor_args(p)
    p.set_defaults(func=replay_handler)


def _add_labels_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--labels",
        default="router",
        choices=("router", "category"),
        help="task label of each row: its benchmark's router task (what the router passes "
        "online, evals/task_map.py) or the dataset's own category (comparison only)",
    )


def _add_run(inner: argparse._SubParsersAction[Any]) -> None:
    from evals.run.cli import add_run

    add_run(inner)


def _add_transfer(inner: argparse._SubParsersAction[Any]) -> None:
    p = inner.add_parser("transfer", help="train on one two-model dataset, score on another "
                         "(not the same file: for one dataset, use replay)")
    p.add_argument("--train", required=True, type=Path)
    p.add_argument("--test", required=True, type=Path)
    p.add_argument("--json", action="store_true")
    _add_labels_arg(p)
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
    """Print one JSON object; non-finite numbers are null (JSON has no Infinity or NaN)."""
    from evals.report import json_safe

    sys.stdout.write(json.dumps(json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


class InputError(ValueError):
    """Bad input found before any work: the message names the file, line, field or option."""


class PlotWriteError(OSError):
    """`--plot` could not be written at the end (a full disk): the report is printed all the
    same, and a previous file there is left whole."""


def _write_plot(draw: Any, path: Path) -> None:
    """Call `draw()` (which writes `path`), turning a failed write into `PlotWriteError`."""
    try:
        draw()
    except OSError as exc:
        raise PlotWriteError(f"--plot {path}: cannot write: {exc.strerror or exc}; a previous "
                             "file there is unchanged") from exc


def _guarded(handler: Any) -> Any:
    """`handler` with its input errors turned into `error: ...` on stderr and exit code 2."""
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
        except (InputError, UnmappedBenchmark) as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 2
        except PlotWriteError as exc:  # after the report was printed
            sys.stderr.write(f"error: {exc}\n")
            return 2
        return code
    run.__doc__ = handler.__doc__
    return run


def _rows(path: Path, what: str) -> list[Any]:
    """The file's decontaminated rows; InputError if missing, unreadable or empty."""
    from evals.outcomes import OutcomeFileError, load_rows

    if not path.is_file():
        raise InputError(f"no such {what} file {path}")
    try:
        rows = load_rows(path)
    except OutcomeFileError as exc:
        raise InputError(str(exc)) from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    if not rows:
        raise InputError(f"{path}: no outcome rows (an empty file, or every row contaminated)")
    return rows


def _known(option: str, names: list[str], models: tuple[str, ...], where: str) -> None:
    unknown = [n for n in names if n not in models]
    if unknown:
        raise InputError(f"{option}: {', '.join(unknown)} not among the models of {where} "
                         f"({', '.join(models) or 'none'})")


def _no_repeats(option: str, names: list[str]) -> None:
    """Each name once: `--models A A` trained an artifact with the same model twice."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"{option}: {', '.join(repeated)} given more than once")


def _priced(table: Any, where: str) -> None:
    """Floor mode compares costs: every model needs a price on every row."""
    import numpy as np

    missing = [f"{m} on {int(n)} of {len(table)} rows" for m, n in
               zip(table.models, np.isnan(table.costs).sum(axis=0), strict=True) if n]
    if missing:
        raise InputError(f"{where}: floor mode needs every model priced (a models.json with "
                         f"prices beside the file); no price for {'; '.join(missing)}")


def _enough_rows(table: Any, folds: int, where: str, *, floor: bool) -> None:
    """Refuse data too small to split into the folds (one prompt gave a scikit-learn
    traceback); warn on stderr when it is small enough that the numbers are noise."""
    from evals.floor import FloorSpec
    from evals.folds import SMALL_SAMPLE, too_few_groups

    groups = len(set(table.groups))
    why = too_few_groups(groups, folds, FloorSpec().inner_folds if floor else None)
    if why is not None:
        raise InputError(f"{where}: {why}; prompts with the same text or reading passage "
                         "count once")
    if len(table) < SMALL_SAMPLE:
        sys.stderr.write(f"warning: {where}: only {len(table)} prompts, about "
                         f"{len(table) // folds} per held-out fold: the numbers are mostly "
                         "noise\n")


def _output_dir(path: Path | None, option: str) -> None:
    if path is not None and not path.resolve().parent.is_dir():
        raise InputError(f"{option} {path}: directory {path.resolve().parent} does not exist")


def _plot_file(path: Path | None) -> None:
    """A `--plot` matplotlib can write, checked before the replay: a file (not a directory,
    which was written as DIR.png beside it) whose extension names a format it knows."""
    if path is None:
        return
    _output_dir(path, "--plot")
    if path.is_dir():
        raise InputError(f"--plot {path} is a directory: give a file name such as "
                         f"{path / 'replay.png'}")
    from evals.plot import image_formats

    formats = image_formats()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        what = f"unknown image format '{suffix}'" if suffix else "no file extension"
        raise InputError(f"--plot {path}: {what} (one of {', '.join(formats)})")


@_guarded
def replay_handler(args: argparse.Namespace) -> int:
    """`slorouter eval replay`."""
    from evals.floor import FloorSpec
    from evals.outcomes import load_table
    from evals.routers import FitConfig

    _plot_file(args.plot)
    rows = _rows(args.dataset, "dataset")
    start = time.perf_counter()
    config = FitConfig(router=args.router, seed=args.seed)
    fraction = args.floor if args.floor is not None else 0.95
    spec = FloorSpec(fraction=fraction, reference=args.relative_to, z=args.z)
    present = sorted({r.benchmark for r in rows})
    benches = [b for b in present if args.benchmark is None or b == args.benchmark]
    if not benches:
        raise InputError(f"no benchmark {args.benchmark!r} in {args.dataset} "
                         f"(it has {', '.join(present)})")
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
    from evals.outcomes import load_table_coverage
    from evals.replay import pair_replay
    from evals.report import pair_json, pair_text
    from evals.task_map import with_labels

    table, found = load_table_coverage(args.dataset, benchmark=bench)
    table = with_labels(table, args.labels)
    if args.relative_to is not None:
        _known("--relative-to", [args.relative_to], table.models, f"{args.dataset} ({bench})")
    if args.floor is not None:
        _priced(table, f"{args.dataset} ({bench})")
    _enough_rows(table, args.folds, f"{args.dataset} ({bench})", floor=args.floor is not None)
    notes = _left_out(meta, found.notes(bench))
    # strong and weak are the better and the worse model on average: --relative-to names the
    # floor's reference only (it used to make its model the curve's "strong" one as well)
    pair = pair_replay(table, config, args.folds, jobs=args.jobs)
    floor = (floor_replay(table, spec, config, args.folds, args.seed)
             if args.floor is not None else None)
    meta["seconds"] = time.perf_counter() - start
    if args.json:
        _emit(pair_json(pair, floor, meta))
    else:
        header = f"replay {args.dataset} router={args.router} folds={args.folds} seed={args.seed}"
        print(pair_text(pair, floor, header) + notes)
    if args.plot is not None:
        from evals.plot import plot_pair

        title = f"{args.dataset.name} ({args.router})"
        _write_plot(lambda: plot_pair(pair, title, args.plot), args.plot)


def _left_out(meta: dict[str, Any], notes: list[str]) -> str:
    """Say on stderr what the data left out, record it in the JSON (`left_out`) and return it
    as lines to append to the text report."""
    for note in notes:
        sys.stderr.write(f"warning: {note}\n")
    meta["left_out"] = notes
    return "".join(f"\nnote: {note}" for note in notes)


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
    from evals.outcomes import load_table_coverage
    from evals.report import multi_json, multi_text
    from evals.task_map import with_labels

    tables, left_out = [], []
    for b in benches:  # every input checked before the first replay
        table, found = load_table_coverage(args.dataset, benchmark=b, priced_only=True)
        where = f"{args.dataset} ({b})"
        if len(table.models) < 2:
            raise InputError(f"{where}: N-model replay needs at least two models priced and "
                             f"scored on every row, found {len(table.models)}")
        if args.relative_to is not None:
            _known("--relative-to", [args.relative_to], table.models, where)
        _enough_rows(table, args.folds, where, floor=True)
        tables.append((b, with_labels(table, args.labels)))
        left_out += found.notes(b)
    notes = _left_out(meta, left_out)
    results = [benchmark_replay(table, b, spec, config, args.folds, args.seed)
               for b, table in tables]
    meta["seconds"] = time.perf_counter() - start
    if args.json:
        _emit(multi_json(results, meta))
    else:
        reference = spec.reference if spec.reference is not None else "best single model"
        header = (
            f"replay {args.dataset} folds={args.folds} seed={args.seed} "
            f"floor={spec.fraction} x {reference}"
        )
        print(multi_text(results, header) + notes)
    if args.plot is not None:
        from evals.plot import plot_multi

        _write_plot(lambda: plot_multi(results, args.plot), args.plot)


@_guarded
def transfer_handler(args: argparse.Namespace) -> int:
    """`slorouter eval transfer`."""
    from evals.outcomes import load_table
    from evals.replay import transfer
    from evals.report import curve_json, curve_line
    from evals.routers import FitConfig
    from evals.task_map import UnmappedBenchmark, with_labels

    _rows(args.train, "--train")
    _rows(args.test, "--test")
    _different_files(args.train, args.test)
    try:
        train_table = with_labels(load_table(args.train), args.labels)
        test_table = with_labels(load_table(args.test), args.labels)
    except UnmappedBenchmark as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    if set(train_table.models) != set(test_table.models) or len(test_table.models) != 2:
        sys.stderr.write("error: transfer needs the same two models in both files\n")
        return 2
    from evals.folds import SMALL_SAMPLE

    test_table, shared = _unseen(train_table, test_table)
    if shared:
        if not len(test_table):
            sys.stderr.write(f"error: every prompt of --test {args.test} is also in --train "
                             f"{args.train} (same text or reading passage): nothing is left "
                             "to score out of sample\n")
            return 2
        sys.stderr.write(f"warning: {shared} --test prompt(s) are also in --train (same text or "
                         f"reading passage): scored on the other {len(test_table)} only\n")
    for name, table in ((args.train, train_table), (args.test, test_table)):
        if len(table) < SMALL_SAMPLE:
            sys.stderr.write(f"warning: {name}: only {len(table)} prompts: the numbers are "
                             "mostly noise\n")
    summary = transfer(train_table, test_table, FitConfig())
    out = ({"train": str(args.train), "test": str(args.test), "test_prompts_in_train": shared}
           | curve_json(summary))
    if args.json:
        _emit(out)
    else:
        print(f"train {args.train} -> test {args.test}: {curve_line(summary)}")
    return 0


def _unseen(train: OutcomeTable, test: OutcomeTable) -> tuple[OutcomeTable, int]:
    """`test` without the prompts `train` holds (the fold-grouping key: same normalised text,
    or a question on the same reading passage), and how many went: a router scored on
    prompts it was trained on reads better than it transfers."""
    import numpy as np

    seen = set(train.groups)
    keep = np.array([i for i, g in enumerate(test.groups) if g not in seen], dtype=np.int64)
    return (test.take(keep), len(test) - len(keep)) if len(keep) < len(test) else (test, 0)


def _different_files(train: Path, test: Path) -> None:
    """Transfer scores a router on prompts it was not trained on: the same file (or a copy of
    it, gzipped or not) twice would score it on its own training data, an in-sample number
    printed as a transfer. One dataset is measured by `eval replay`, on held-out folds."""
    from evals.outcomes import rows_sha256

    if train.samefile(test) or rows_sha256(train) == rows_sha256(test):
        same = "the same file" if train.samefile(test) else "files with the same content"
        raise InputError(f"--train {train} and --test {test} are {same}: transfer scores "
                         "a router on another dataset than it was trained on; for one "
                         f"dataset use `slorouter eval replay --dataset {train}` (held-out "
                         "folds)")


def _check_train_inputs(args: argparse.Namespace) -> None:
    """What `train` would trip over, said up front: an empty or malformed file, an unknown
    benchmark, model or reference, a model not scored on every row, missing prices."""
    from evals.outcomes import load_table_coverage
    from policies.files import prepare_directory

    rows = _rows(args.outcomes, "outcomes")
    present = sorted({r.benchmark for r in rows})
    if args.benchmark is not None and args.benchmark not in present:
        raise InputError(f"no benchmark {args.benchmark!r} in {args.outcomes} "
                         f"(it has {', '.join(present)})")
    rows = [r for r in rows if args.benchmark is None or r.benchmark == args.benchmark]
    scored = tuple(sorted({m for r in rows for m in r.scores}))
    if args.models:
        _no_repeats("--models", args.models)
        _known("--models", list(args.models), scored, str(args.outcomes))
        partial = [f"{m} ({sum(m not in r.scores for r in rows)} of {len(rows)} rows)"
                   for m in args.models if any(m not in r.scores for r in rows)]
        if partial:
            raise InputError(f"--models: not scored on every row: {', '.join(partial)}")
    table, _ = load_table_coverage(args.outcomes, benchmark=args.benchmark,
                                   models=tuple(args.models) if args.models else None,
                                   priced_only=not args.models)
    if len(table.models) < 2:
        raise InputError(f"{args.outcomes}: training needs at least two candidates priced and "
                         f"scored on every row, found {', '.join(table.models) or 'none'}")
    if args.relative_to is not None:
        _known("--relative-to", [args.relative_to], table.models, str(args.outcomes))
    _priced(table, str(args.outcomes))
    _enough_rows(table, args.folds, str(args.outcomes), floor=True)
    problem = prepare_directory(args.out)  # last: a refused input leaves no directory behind
    if problem is not None:
        raise InputError(f"--out: {problem}")


@_guarded
def train_handler(args: argparse.Namespace) -> int:
    """`slorouter train-router`."""
    from evals.floor import FloorSpec
    from evals.report import json_safe
    from evals.task_map import UnmappedBenchmark
    from evals.train_router import TrainRequest, train

    _check_train_inputs(args)
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
    print(json.dumps(json_safe(meta["metrics"]), indent=2, sort_keys=True, allow_nan=False))
    return 0
