"""`slorouter sim`: run the provider simulator as an OpenAI- and Anthropic-compatible server.

    slorouter sim --port 8001 [--host 127.0.0.1] [--profile FILE] [--seed N]
                  [--default-model NAME]

Without `--profile` the built-in profiles (`default_profiles.json`, fitted to measured provider
latencies) are served. `--default-model` makes unknown model names use that model's profile
instead of answering 404. Heavy imports stay inside the handler so `slorouter --help` is fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from router.cli_types import port_number


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the `sim` sub-command."""
    parser = subparsers.add_parser(
        "sim",
        help="run the provider simulator (OpenAI + Anthropic wire formats)",
        description="A simulated LLM provider with measured latency profiles, faults and a "
        "control API (see docs/simulator.md).",
    )
    parser.add_argument("--port", type=port_number, required=True,
                        help="TCP port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="profile file, JSON or YAML (default: the built-in profiles)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the latency and fault draws (default: random)")
    parser.add_argument("--default-model", default=None,
                        help="answer unknown model names with this model's profile, not 404")
    parser.add_argument("--exit-with-parent", nargs="?", type=int, const=0, default=None,
                        metavar="PID",
                        help="stop when the process that started it (PID, as it gave it: "
                             "default its parent once running) is gone, however it ended "
                             "(`serve` starts its embedded simulator so)")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """Load the profiles and serve until SIGINT/SIGTERM; 2 on a bad profile file, 3 when it
    cannot listen (as `serve`)."""
    import asyncio
    import os
    import signal
    import sys

    from router.providers.simulator.profile import ProfileError, load_profile_file, validated
    from router.providers.simulator.server import serve_until_stopped

    try:
        profiles = load_profile_file(args.profile)
        if args.default_model is not None:
            profiles = validated({**profiles.model_dump(), "default_model": args.default_model})
    except ProfileError as exc:  # one line a problem, as `serve` lists its config's
        print("slorouter sim: bad profile:\n  - " + "\n  - ".join(exc.problems),
              file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # The starter's own pid when it gave it: a parent gone before this line (a signal
        # during its start-up) would otherwise be read as init, and never be seen to go.
        parent = args.exit_with_parent or os.getppid()
        watch = (asyncio.create_task(_stop_when_orphaned(parent, stop))
                 if args.exit_with_parent is not None else None)
        await serve_until_stopped(profiles, args.host, args.port, args.seed, stop)
        if watch is not None:
            watch.cancel()

    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(main())
    except OSError as exc:  # the port is taken, the host is not this machine's: no traceback
        print(f"slorouter sim: cannot listen on {args.host}:{args.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 3
    return 0


async def _stop_when_orphaned(parent: int, stop: Any, every_s: float = 0.5) -> None:
    """Set `stop` once this process's parent is no longer `parent` (it ended: SIGKILL, a
    signal during its start-up, SIGHUP, and the process was handed to another parent)."""
    import asyncio
    import os

    while os.getppid() == parent:
        await asyncio.sleep(every_s)
    stop.set()
