"""The `slorouter` command line: one sub-command per job, each registered by its own module.

Every module listed in `COMMAND_MODULES` exposes `add_parser(subparsers)`, which adds its
sub-command(s) and sets `func` (taking the parsed namespace, returning an exit code). Modules
keep heavy imports inside their handlers so that `slorouter --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "router.serve_cli",
    "router.policy_cli",
    "router.experiments_cli",
    "router.providers.simulator.cli",
    "router.classify.cli",
    "router.loadtest.cli",
    "evals.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slorouter",
        description="OpenAI-compatible LLM router: cost, latency and quality per task.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
