"""Start real processes on free loopback ports and wait until they answer.

`free_port()` asks the kernel for an unused port; `ManagedProcess` starts a command, polls an
HTTP readiness URL (or a TCP port) and terminates the whole process group on `stop()`;
`file_size_limit` makes a child's writes fail part way. A `ManagedProcess` with `warm=True` runs
its `python -m router.cli ...` as a fork of the session's warm launcher (`tests/support/
launcher.py`), which has the router's heavy imports done already.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

PYTHON = sys.executable
VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
ROUTER_CLI = (PYTHON, "-m", "router.cli")


def file_size_limit(limit: int) -> None:
    """For `preexec_fn`: the child may grow no file past `limit` bytes; a write past it fails
    with EFBIG (as on a full disk or quota) instead of killing the child with SIGXFSZ."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on loopback `port`. A port handed out
    by `free_port` can be taken meanwhile by another worker's process: answered by that one, a
    child that then failed to bind it (exit 3) looked ready, and its test met "connection
    refused" later on. True where /proc cannot tell (another OS)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            return True
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in wanted:
                return True
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue
    return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5) as response:
            return bool(200 <= response.status < 500)
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (urllib.error.URLError, OSError):
        return False


def _tcp_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Launcher:
    """The client of one warm launcher process (JSON lines over its stdin and stdout); tests
    that start services from several threads share it, one question and answer at a time."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([PYTHON, "-m", "tests.support.launcher"], cwd=ROOT,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._turn = threading.Lock()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        stdin: IO[str] | None = self._proc.stdin
        stdout: IO[str] | None = self._proc.stdout
        assert stdin is not None and stdout is not None
        with self._turn:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise RuntimeError(f"the warm launcher has gone (exit {self._proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        """Close its stdin: it kills the children still running and exits."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


_launcher_lock = threading.Lock()


@functools.cache
def _started_launcher() -> Launcher:
    launcher = Launcher()
    atexit.register(launcher.close)
    return launcher


def warm_launcher() -> Launcher:
    """This test process's launcher, started on first use (by whichever thread comes first) and
    closed when the process exits."""
    with _launcher_lock:
        return _started_launcher()


class LaunchedChild:
    """A child of the warm launcher, with the part of `subprocess.Popen` that
    `ManagedProcess` uses."""

    def __init__(self, launcher: Launcher, args: Sequence[str], env: Mapping[str, str],
                 cwd: Path | None, log_path: Path | None) -> None:
        self._launcher = launcher
        self.returncode: int | None = None
        self.pid: int = launcher.ask({"run": list(args), "env": dict(env),
                                      "cwd": str(cwd or Path.cwd()),
                                      "log": str(log_path) if log_path else None})["pid"]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.ask({"poll": self.pid})["code"]
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.02)
        return code


@dataclass
class ManagedProcess:
    """A child process in its own process group, with its output in a log file."""

    argv: Sequence[str]
    port: int
    ready_url: str | None = None
    env: Mapping[str, str] | None = None
    log_path: Path | None = None
    startup_timeout_s: float = 30.0
    cwd: Path | None = None
    warm: bool = False  # fork `python -m router.cli ...` from the warm launcher
    _proc: subprocess.Popen[bytes] | LaunchedChild | None = field(default=None, init=False)

    def start(self) -> ManagedProcess:
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        if self.warm:
            assert tuple(self.argv[:3]) == ROUTER_CLI, "only `python -m router.cli` runs warm"
            self._proc = LaunchedChild(warm_launcher(), self.argv[3:], env, self.cwd,
                                       self.log_path)
        else:
            log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
            self._proc = subprocess.Popen(
                list(self.argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.cwd,
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        answered = held = False  # what the last check saw, for the error below
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited early with {self._proc.returncode}:\n"
                                   f"{self.log_text()}")
            answered = _http_ok(self.ready_url) if self.ready_url else _tcp_ok(self.port)
            held = self._proc is not None and listens(self._proc.pid, self.port)
            if answered and held:
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(
            f"{' '.join(self.argv)} not ready in {self.startup_timeout_s}s (last check: "
            f"{self.ready_url or f'port {self.port}'} {'answered' if answered else 'no answer'}"
            f", port {'held' if held else 'not held'} by pid "
            f"{self._proc.pid if self._proc is not None else '-'}):\n{self.log_text()}")

    def log_text(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def wait(self, timeout_s: float) -> int:
        """The exit code, waiting up to `timeout_s` (raises `subprocess.TimeoutExpired`)."""
        assert self._proc is not None
        return self._proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL the process group at once (for crash tests)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL after 5 s."""
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
