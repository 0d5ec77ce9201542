"""`slorouter experiments report NAME [--plot out.png]`: an experiment's table from a server.

Reads `GET /v1/experiments?name=NAME` from a running slorouter (`--url`, `--api-key` or
`SLOROUTER_API_KEY`), prints the arms' table (differences with bootstrap intervals, the
sequential test, guardrail halts) and optionally draws the latency distributions and intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from router.cli_types import http_url


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("experiments", help="A/B experiments on routes")
    actions = parser.add_subparsers(dest="experiments_command", required=True)
    report = actions.add_parser(
        "report", help="print an experiment's analysis",
        description="Fetch an experiment's analysis from a running slorouter (GET "
                    "/v1/experiments) and print it. Exit 0; 1 when the server does not know "
                    "the experiment; 2 when the server cannot be reached or refuses the request "
                    "(its message is printed: a key without the slorouter:operator scope).")
    report.add_argument("name", help="the experiment's name, as under `experiments:`")
    report.add_argument("--url", type=http_url, default="http://127.0.0.1:8080",
                        help="the slorouter to ask (default: %(default)s)")
    report.add_argument("--api-key", default=os.environ.get("SLOROUTER_API_KEY"),
                        help="bearer key with the slorouter:operator scope, when the "
                             "server has api_keys (default: the SLOROUTER_API_KEY "
                             "environment variable, else none)")
    report.add_argument("--plot", type=Path,
                        help="also write a PNG of the arms' distributions to this file "
                             "(default: no plot)")
    report.set_defaults(func=report_handler)


def report_handler(args: argparse.Namespace) -> int:
    from router.experiments.report import ExperimentReport, report_command

    query = urllib.parse.urlencode({"name": args.name})
    request = urllib.request.Request(f"{args.url.rstrip('/')}/v1/experiments?{query}")
    if args.api_key:
        request.add_header("authorization", f"Bearer {args.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data = json.loads(response.read())["data"]
    except urllib.error.HTTPError as exc:  # the server's own refusal says what to fix
        print(f"slorouter experiments: {args.url} refused the request (HTTP {exc.code}): "
              f"{_error_message(exc)}", file=sys.stderr)
        return 2
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        print(f"slorouter experiments: cannot read {args.url}: {exc}", file=sys.stderr)
        return 2
    if not data:
        print(f"slorouter experiments: no experiment named {args.name!r}", file=sys.stderr)
        return 1
    report = ExperimentReport.model_validate(data[0])
    return report_command(report, out=sys.stdout, plot_path=args.plot)


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The message of an OpenAI-shaped error body (a key without the `slorouter:operator`
    scope: "... needs a key with the 'slorouter:operator' scope"), else the HTTP reason."""
    try:
        message = json.loads(exc.read())["error"]["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return str(exc.reason)
    return str(message)
