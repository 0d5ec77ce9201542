"""A warm launcher for `python -m router.cli ...`: one process imports the router (litellm and
scikit-learn included) once, then forks a fresh child for each command it is asked to run.

Starting `slorouter serve` imports about eight seconds of CPU on a slow 2-core host, most of it
litellm; the suite starts over a hundred routers. A child forked from here is still a real,
separate process of its own session (process group), working directory, environment, argv and
log file, serving real HTTP; it only finds its modules already imported, as a pre-loading
server's workers do. Tests of how the command itself starts and what it inherits from its parent
start it from scratch (`start_router(..., warm=False)` in `tests/integration/
test_serve_command.py`), as do the tests that run a command to its end (`subprocess.run`).

Run as `python -m tests.support.launcher`; it speaks JSON lines on stdin/stdout and ends, killing
its children's process groups, when stdin closes:

    {"run": [args], "env": {...}, "cwd": "...", "log": "..." or null}  -> {"pid": 123}
    {"poll": 123}                                                      -> {"code": null or int}

`code` is the exit status as `subprocess.Popen.returncode` gives it (-N for signal N).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from typing import Any

import router.cli
import router.providers.litellm_adapter  # the import the launcher is for
import router.providers.simulator.server
import router.serve_cli
import router.wiring


def _become_child(request: dict[str, Any]) -> None:
    """In the forked child: take the command's session, files, directory and environment, run
    it and exit as `python -m router.cli` would (atexit handlers, flushed output)."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    log = request.get("log") or os.devnull
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(stdin)
    os.close(out)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    args = [str(arg) for arg in request["run"]]
    sys.argv = [router.cli.__file__, *args]
    sys.exit(router.cli.main(args))


def _status(pid: int, codes: dict[int, int]) -> int | None:
    if pid not in codes:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes[pid] = os.waitstatus_to_exitcode(status)
    return codes.get(pid)


def _answer(reply: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def serve_requests() -> None:
    codes: dict[int, int] = {}
    children: list[int] = []
    for line in sys.stdin:
        request = json.loads(line)
        if "run" in request:
            pid = os.fork()
            if pid == 0:
                _become_child(request)  # never returns
            children.append(pid)
            _answer({"pid": pid})
        else:
            _answer({"code": _status(request["poll"], codes)})
    for pid in children:  # the suite has gone: take its strays with it
        if _status(pid, codes) is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    serve_requests()
