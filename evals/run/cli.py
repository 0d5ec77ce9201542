"""`slorouter eval run`: run suites against a config's logical models, write an eval report.

    slorouter eval run --config CONFIG --suite FILE [FILE ...] [--suite FILE ...] [--models m1,m2]
        [--concurrency N] [--timeout S] [--judge-model M] [--out report.json]
        [--details items.jsonl] [--max-error-rate F]

Deployments, secrets (`env:` references) and `${VAR}` addresses come from the config and the
environment, as for `slorouter serve`. The report goes to `--out` (else stdout), the summary
table to stderr. Exit codes: 0 ok, 1 a report row (model x task x metric) with a larger share
of failed calls than `--max-error-rate` (default 0.05) allows: nothing is written, 2 bad input
(config, suite, model names) or a report that cannot be written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.cli_types import positive_number

if TYPE_CHECKING:  # loaded by the handler: every `slorouter` command registers this parser
    from evals.run.aggregate import Cell
    from evals.run.suite import Suite

# A failed call scores 0: at 5 % of a row's calls its mean is at most 0.05 low, under half the
# +-0.11 of a 95 % interval on a 50-item suite (the shipped suites have 50 to 57 items).
DEFAULT_MAX_ERROR_RATE = 0.05


def add_run(inner: argparse._SubParsersAction[Any]) -> None:
    """Register `eval run` beside `eval replay`."""
    p = inner.add_parser("run", help="run eval suites against live deployments, write a report")
    p.add_argument("--config", required=True, type=Path, help="router config (YAML)")
    p.add_argument("--suite", required=True, type=Path, action="extend", nargs="+",
                   metavar="FILE", help="suite file(s); several after one --suite, or the "
                   "flag repeated: one report for all")
    p.add_argument("--models", default=None, help="logical models, comma-separated (default: all)")
    p.add_argument("--concurrency", type=int, default=8, help="calls in flight (default 8)")
    p.add_argument("--timeout", type=positive_number, default=None,
                   help="seconds per call, a finite number > 0 (default: the deployment's "
                   "timeout_s)")
    p.add_argument("--judge-model", default=None, help="logical model that judges (overrides "
                                                       "the suite's judge.model)")
    p.add_argument("--out", type=Path, default=None, help="report JSON (default: stdout)")
    p.add_argument("--details", type=Path, default=None, help="per-item results (JSONL)")
    p.add_argument("--max-error-rate", type=_share, default=DEFAULT_MAX_ERROR_RATE,
                   help="refuse the report (exit 1; only --details written) when a row "
                   "(model x task x metric) has a larger share of failed calls, which score 0 "
                   "(default "
                   f"{DEFAULT_MAX_ERROR_RATE:g}; 1.0 writes it whatever failed)")
    p.set_defaults(func=run_handler)


class InputError(ValueError):
    """Bad command-line input: the message says what and where."""


def _share(text: str) -> float:
    """A share of calls in [0, 1] (nan and 1.5 refused: above 1 no run could ever fail)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1]: a share of the calls")
    return value


def check_outputs(args: argparse.Namespace) -> None:
    """`--out` and `--details` can be written: checked before any call, not after all of them."""
    for option, path in (("--out", args.out), ("--details", args.details)):
        if path is None:
            continue
        parent = path.resolve().parent
        if not parent.is_dir():
            raise InputError(f"{option} {path}: directory {parent} does not exist")
        if path.is_dir():
            raise InputError(f"{option} {path} is a directory")
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise InputError(f"{option} {path}: not writable")


def _judges(suites: list[Suite], override: str | None, models: set[str]) -> dict[str, str]:
    from evals.run.suite import JudgeGrader

    judges = {}
    for suite in suites:
        graders = [suite.grader, *(i.grader for i in suite.items if i.grader is not None)]
        if not any(isinstance(g, JudgeGrader) for g in graders):
            continue
        name = override if override is not None else (suite.judge.model if suite.judge else None)
        if name is None:
            raise InputError(f"suite {suite.name} needs a judge: set judge.model or --judge-model")
        if name not in models:
            raise InputError(f"judge model {name!r} is not a model of the config")
        judges[suite.name] = name
    return judges


def build_plan(args: argparse.Namespace, environ: dict[str, str]) -> Any:
    """Config + suites + arguments -> `RunPlan`; raises InputError on any bad input."""
    from evals.run.runner import RunPlan
    from evals.run.suite import SuiteError, load_suite, repeated_items, ungradable_items
    from policies.loader import PolicyValidationError, load_config_file
    from router.errors import ConfigError
    from router.providers.price_table import PriceTable
    from router.runtime_config import resolve

    try:
        config = load_config_file(args.config, environ)
        runtime = resolve(config, environ, PriceTable.bundled().prices)
        suites = [load_suite(path) for path in args.suite]
    except (OSError, PolicyValidationError, ConfigError, SuiteError) as exc:
        raise InputError(str(exc)) from exc
    repeated = repeated_items(suites)
    if repeated:
        raise InputError("each item may be run once per report: " + "; ".join(repeated))
    for path, suite in zip(args.suite, suites, strict=True):
        ungradable = ungradable_items(suite)
        if ungradable is not None:
            raise InputError(f"{path}: {ungradable}")
    known = set(runtime.models)
    models = tuple(m.strip() for m in args.models.split(",") if m.strip()) if args.models \
        else tuple(runtime.models)
    unknown = [m for m in models if m not in known]
    if unknown or not models:
        raise InputError(f"unknown models {unknown}; the config has {sorted(known)}")
    if args.concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    deployments = {name: tuple(runtime.deployments[d] for d in names)
                   for name, names in runtime.models.items()}
    return RunPlan(tuple(suites), models, deployments, _judges(suites, args.judge_model, known),
                   args.concurrency, args.timeout)


async def _execute(plan: Any) -> list[Any]:
    from evals.run.calls import Callers
    from evals.run.runner import run_plan

    callers = Callers.create()
    try:
        return await run_plan(plan, callers)
    finally:
        await callers.close()


def run_handler(args: argparse.Namespace) -> int:
    """`slorouter eval run`."""
    from evals.run.aggregate import (
        build_report,
        cells,
        details_jsonl,
        over_error_rate,
        summary_text,
    )

    try:
        check_outputs(args)
        plan = build_plan(args, dict(os.environ))
    except InputError as exc:
        sys.stderr.write(f"slorouter eval run: {exc}\n")
        return 2
    outcomes = asyncio.run(_execute(plan))
    found = cells(outcomes)
    sys.stderr.write(summary_text(found) + "\n")
    refused = over_error_rate(found, args.max_error_rate)
    if refused:  # no report: a previous one stays the one the router reads
        sys.stderr.write(refusal(refused, args.max_error_rate, args.out) + "\n")
        # The per-item results are written all the same (the router never reads them): they
        # hold each failed call's error, which a paid run would otherwise have to repeat.
        if args.details is not None and not _write(args.details, details_jsonl(outcomes)):
            return 2
        if args.details is not None:
            sys.stderr.write(f"slorouter eval run: each item's result, failures included, is "
                             f"in {args.details}\n")
        return 1
    created = datetime.now(UTC).isoformat(timespec="seconds")
    provider_models = {m: [d.model for d in plan.deployments[m]] for m in plan.models}
    report = build_report(plan.suites, found, created, provider_models)
    text = report.model_dump_json(indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    written = [(args.out, text), (args.details, details_jsonl(outcomes) if args.details else "")]
    for path, content in written:
        if path is not None and not _write(path, content):
            return 2
    return 0


def _write(path: Path, content: str) -> bool:
    """Write `path` all or nothing (start-up reads a report, maybe while this run writes it);
    False, with the reason on stderr, when it cannot be written."""
    from policies.files import write_file

    try:
        write_file(path, content.encode("utf-8"))
    except OSError as exc:
        sys.stderr.write(f"slorouter eval run: cannot write {path}: "
                         f"{exc.strerror or exc}; a previous file there is unchanged\n")
        return False
    return True


def refusal(rows: list[Cell], max_rate: float, out: Path | None) -> str:
    """Why no report was written: each row over the limit with its failed calls by kind, and
    the setting that would write it anyway."""
    from evals.run.aggregate import failed_calls

    named = "; ".join(
        f"{c.model} {c.task} {c.metric}: {failed_calls(c)} of {c.n} calls failed ("
        + ", ".join(f"{kind} {count}" for kind, count in c.errors.items()) + ")"
        for c in rows)
    kept = ("" if out is None else f" ({out} is unchanged)" if out.exists()
            else f" ({out} not created)")
    return (f"slorouter eval run: no report written{kept}: failed calls, which score 0, "
            f"exceed --max-error-rate {max_rate:g} in {len(rows)} row(s): {named}. Fix what "
            "failed and run again, or pass --max-error-rate 1.0 to write the report whatever "
            "failed.")
