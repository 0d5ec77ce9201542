"""`slorouter bench`: run a workload mix open-loop against an OpenAI-compatible endpoint.

    slorouter bench --url http://127.0.0.1:8080 [--workload bench/workloads/default.json]
                    [--rate 10] [--duration 60] [--max-requests N] [--seed 7] [--model NAME]
                    [--api-key KEY | env SLOROUTER_BENCH_API_KEY] [--out DIR] [--json]

Prints achieved rate, E2E/TTFT/TPOT percentiles of the answered requests (from each request's
scheduled arrival, the generator's dispatch lag included and shown; a failed, timed-out or
interrupted request has no latency there and is counted under its error class) and errors by
class, per request class and for stream/non-stream (a 200 whose body is no chat completion,
such as an error object, is an error too: `error_in_body`, `not_a_completion`; the generator's
own limits are `generator_out_of_*`, not the target's); writes `summary.json`,
`latency_hist.png` and `percentiles_over_time.png` to `--out`. Exit code: 0 when every request
succeeded, 1 when any failed, 2 on bad arguments (checked before any load: a run of no request,
or of more than a million, is one), 130 when interrupted (Ctrl-C: the answers so far are summarised,
the requests still in flight counted under `interrupted`).
Heavy imports stay inside the handler so `slorouter --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from router.cli_types import http_url, positive_int, positive_number, seed_number

DEFAULT_WORKLOAD = Path("bench/workloads/default.json")


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("bench", help="open-loop load test with a workload mix",
                                   description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--url", required=True, type=http_url,
                        help="base URL of slorouter or any OpenAI-compatible server "
                             "(…/v1/chat/completions is added)")
    parser.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD,
                        help="the workload mix (JSON); the default is relative to the working "
                             "directory, so run from the checkout (default: %(default)s)")
    parser.add_argument("--rate", type=positive_number, default=10.0,
                        help="mean arrivals per second, Poisson (default: %(default)s)")
    parser.add_argument("--duration", type=positive_number, default=60.0,
                        help="seconds of arrivals (default: %(default)s)")
    parser.add_argument("--max-requests", type=positive_int, default=None,
                        help="stop sending after this many requests (default: no cap)")
    parser.add_argument("--seed", type=seed_number, default=7,
                        help="seed of the arrival times and the mix's draws (default: "
                             "%(default)s)")
    parser.add_argument("--model", default=None,
                        help="send this model name instead of the mix's (default: the mix's)")
    parser.add_argument("--api-key", default=os.environ.get("SLOROUTER_BENCH_API_KEY"),
                        help="bearer key (default: the SLOROUTER_BENCH_API_KEY environment "
                             "variable, else none)")
    parser.add_argument("--timeout", type=positive_number, default=60.0,
                        help="per-request timeout, s (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/bench"),
                        help="directory for summary.json and the two plots (default: "
                             "%(default)s)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true",
                        help="do not print progress while the load runs")
    parser.set_defaults(func=handler)


def chat_url(base: str) -> str:
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def handler(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import sys

    import orjson

    from router.loadtest.loadgen import plan_run, run_plan
    from router.loadtest.outputs import exit_code, prepare_out, write_outputs
    from router.loadtest.progress import Progress
    from router.loadtest.stats import format_summary, summarize
    from router.loadtest.workload import load_workload

    if args.workload == DEFAULT_WORKLOAD and not DEFAULT_WORKLOAD.is_file():
        print(f"slorouter bench: no workload mix at {DEFAULT_WORKLOAD}, the default, read from "
              "the working directory: the mix and its prompt pool come with the source "
              "checkout, not the installed package; run from the checkout or pass "
              "--workload FILE", file=sys.stderr)
        return 2
    try:
        workload = load_workload(args.workload)
        _check_api_key(args.api_key)
        plan = plan_run(workload, args.rate, args.duration, args.seed, args.max_requests,
                        args.model)
        prepare_out(args.out)  # before the load: a bad --out wastes none
    except (OSError, ValueError) as exc:
        print(f"slorouter bench: {exc}", file=sys.stderr)
        return 2
    bar = None if args.no_progress else Progress(len(plan),
                                                 f"{workload.mix.name}@{args.rate:g}/s")
    result = asyncio.run(run_plan(args.url, chat_url(args.url), plan, args.rate, args.duration,
                                  args.seed, args.api_key, args.timeout,
                                  bar.update if bar else None))
    if bar is not None:
        bar.close()
    summary = summarize(result)
    written = write_outputs(result, summary, args.out)
    print(orjson.dumps(dataclasses.asdict(summary)).decode() if args.json
          else format_summary(summary))
    print(f"wrote {', '.join(str(args.out / name) for name in written)}", file=sys.stderr)
    if result.interrupted:
        cut = summary.errors.get("interrupted", 0)
        print(f"slorouter bench: interrupted after {summary.sent - cut} answered requests "
              f"({cut} in flight counted as interrupted)", file=sys.stderr)
    return exit_code(result, summary)


def _check_api_key(key: str | None) -> None:
    """A key no HTTP header can carry (a line break, non-Latin-1 text) refused up front: every
    request of the run would fail on it, and the run said so only at its end."""
    from router.providers.http1 import Target, request_head

    if key is not None:
        try:
            request_head(Target.of("http://localhost/"), {"authorization": f"Bearer {key}"}, 0)
        except (ValueError, UnicodeEncodeError) as exc:
            raise ValueError(f"--api-key cannot be sent in a header: {exc}") from None
