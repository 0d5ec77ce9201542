"""`slorouter serve`: load the configuration (or the embedded default) and run the service.

Refuses to listen beyond loopback when no API keys are configured. In the embedded default
without provider keys it starts the provider simulator as a child process and stops it on exit.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from router.cli_types import port_number
from router.logs import event

log = logging.getLogger("slorouter.serve")

# After `shutdown_grace_s` the requests still in flight are ended with a `server_shutting_down`
# error (a 503, or a stream's last event); uvicorn cancels whatever still runs this much later.
FAREWELL_S = 1  # whole seconds: uvicorn takes an int


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the routing service",
        description="Run the routing service (OpenAI-compatible, /v1/chat/completions).")
    parser.add_argument("--config", type=Path,
                        help="YAML config, docs/configuration.md (default: the embedded default: "
                             "the provider simulator's demo models, or OpenAI/Anthropic when "
                             "OPENAI_API_KEY / ANTHROPIC_API_KEY is set)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on; anything but loopback needs api_keys in the "
                             "config (default: %(default)s)")
    parser.add_argument("--port", type=port_number, default=8080,
                        help="port to listen on (default: %(default)s)")
    parser.add_argument("--log-level", default="info",
                        choices=("debug", "info", "warning", "error", "critical"),
                        help="level of the JSON log lines on stderr (default: %(default)s)")
    parser.add_argument("--access-log", action="store_true",
                        help="one `request_finished` JSON line per request (ids, status, "
                             "model, task, timings, tokens, cost; never text): on at debug "
                             "level too")
    parser.set_defaults(func=serve_interruptible)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_simulator(environ: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `slorouter sim` on a free loopback port and point the default config at it."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "sim", "--port", str(port),
                             "--exit-with-parent", str(os.getpid())], start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("the provider simulator failed to start") from None
            time.sleep(0.1)
    environ["SLOROUTER_SIM_BASE"] = base
    environ.setdefault("SLOROUTER_SIM_KEY", "sim-" + secrets.token_hex(8))
    return proc


def serve_interruptible(args: argparse.Namespace) -> int:
    """`serve`, with Ctrl+C before the server takes SIGINT over (during start-up) ending it as
    SIGINT does later, 130, rather than in a traceback; the embedded simulator stops by itself
    (it watches this process)."""
    try:
        return serve(args)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


def serve(args: argparse.Namespace) -> int:
    from router import logs
    from router.api.sse import InFlight
    from router.errors import ConfigError
    from router.redis_auth import eviction_loss, eviction_risks, start_up_pings
    from router.telemetry import redact
    from router.wiring import build_from_config, secret_values

    logs.configure(args.log_level, access_log=args.access_log)
    environ = dict(os.environ)
    simulator: subprocess.Popen[bytes] | None = None
    in_flight = InFlight()
    try:
        config, simulator = _load(args.config, environ)
        # Before anything connects, so that no start-up line shows a key or a Redis password.
        redact.install(secret_values(config, environ))
        base_dir = args.config.resolve().parent if args.config else _defaults_dir()
        app, runtime = build_from_config(config, environ, base_dir, in_flight)
        refused, unreachable = start_up_pings(config)
        if refused:  # a wrong password is no outage to wait out
            raise ConfigError(refused)
        for setting, why in unreachable:  # an outage it runs through: said now, not at need
            event(log, "redis_unreachable_at_start", logging.WARNING, setting=setting,
                  error=why)
        # A warning: it may never fill up (and a Redis that did not answer is not asked again).
        for setting, policy in eviction_risks(config, [name for name, _ in unreachable]):
            event(log, "redis_may_evict_records", logging.WARNING, setting=setting,
                  maxmemory_policy=policy, risk=eviction_loss(setting, policy),
                  fix="give it a Redis with maxmemory-policy noeviction (the result cache may "
                      "keep its own, evicting one)")
    except ConfigError as err:
        # the later stages' problems (a secret's variable unset, a learned router's path)
        # name the file too, as the loader's do
        named = str(args.config) if args.config is not None else None
        if named is not None and not all(p.startswith(named) for p in err.problems):
            err = ConfigError([p if p.startswith(named) else f"{named}: {p}"
                               for p in err.problems])
        print(f"slorouter: {err}", file=sys.stderr)
        _stop(simulator)
        return 2
    if not runtime.auth_required and not is_loopback(args.host):
        print("slorouter: no api_keys are configured, so the service only binds to loopback "
              "(127.0.0.1, ::1); configure api_keys to listen on "
              f"{args.host}", file=sys.stderr)
        _stop(simulator)
        return 2
    try:
        listeners = _listen(args.host, args.port)
    except OSError as err:  # the port is taken, the host is not this machine's: one line
        print(f"slorouter: cannot listen on {_address(args.host, args.port)}: "
              f"{err.strerror or err}",
              file=sys.stderr)
        _stop(simulator)
        return 3
    event(log, "starting", host=args.host, port=listeners[0].getsockname()[1],
          policy_version=runtime.version, config_version=runtime.config_version,
          deployments=sorted(runtime.deployments), auth_required=runtime.auth_required)
    # uvicorn drains on SIGINT even when the process was started with it ignored (a background
    # job of a non-interactive shell), then re-raises it with the handler it found: with Python's
    # own handler in place that ends as 130 however the process was started, not 0.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ended_by = _run(app, listeners, args.log_level, config.server.shutdown_grace_s,
                        in_flight.end_all, lambda: _stop(simulator))
    except KeyboardInterrupt:  # SIGINT (Ctrl+C), re-raised by uvicorn once the drain is over
        return 128 + signal.SIGINT
    finally:
        _stop(simulator)
    # A SIGTERM or SIGHUP re-raised after the drain ends the process, except as PID 1 (a
    # container without an init: the kernel drops it), where the status says it instead.
    return 128 + ended_by if ended_by is not None else 0


def _load(path: Path | None, environ: dict[str, str]) -> tuple[Any, subprocess.Popen[bytes] | None]:
    from policies.loader import PolicyValidationError, load_config_file
    from router import embedded
    from router.errors import ConfigError

    loaders: Callable[[], Any]
    simulator = None
    if path is not None:
        source = f"config file {path}"
        loaders = lambda: load_config_file(path, environ)  # noqa: E731
    elif embedded.has_provider_keys(environ):
        source = "built-in provider default (API keys found in the environment)"
        loaders = lambda: embedded.provider_config(environ)  # noqa: E731
    else:
        simulator = start_simulator(environ)
        source = ("built-in simulator default: no OPENAI_API_KEY or ANTHROPIC_API_KEY set, so "
                  "demo models run on the provider simulator at "
                  + environ["SLOROUTER_SIM_BASE"])
        loaders = lambda: embedded.simulator_config(environ)  # noqa: E731
    try:
        config = loaders()
    except PolicyValidationError as err:  # a file's problems name it, as `policy check` does
        raise ConfigError(err.problems if path is None
                          else [f"{path}: {problem}" for problem in err.problems]) from err
    except OSError as err:
        raise ConfigError([f"cannot read {source}: {err.strerror or err}"]) from err
    event(log, "config_loaded", source=source)
    return config, simulator


def _defaults_dir() -> Path:
    from router.embedded import DEFAULTS

    return DEFAULTS


def _address(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets (`[::1]:8080`, where
    `::1:8080` reads as an address with no port)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(host: str, port: int) -> list[socket.socket]:
    """The service's sockets, bound before the app starts (a port in use used to surface only
    as uvicorn's log line, and nothing at `--log-level critical`, after the app had started
    up and shut down again). One per address `host` resolves to, as asyncio's `create_server`
    binds when uvicorn binds itself: `localhost` on both 127.0.0.1 and ::1 where both are
    listed, an IPv6 socket IPv6 only. With port 0 every address gets the first one's port."""
    infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    addresses = list(dict.fromkeys((family, address) for family, _, _, _, address in infos))
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            if sockets and port == 0:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock = socket.socket(family=family, type=socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _run(app: Any, listeners: list[socket.socket], log_level: str, grace_s: int,
         on_grace_over: Callable[[], None], on_stopped: Callable[[], None]) -> int | None:
    """Serve until a signal's drain is over; the termination signal that should have ended the
    process but did not (PID 1: `QuietServer.ended_by`), else None."""
    import uvicorn

    from router.quiet_server import QuietServer
    from router.service_protocol import ServiceProtocol

    host, port = listeners[0].getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, loop="uvloop", http=ServiceProtocol,
                            access_log=False, log_config=None, log_level=log_level,
                            lifespan="on", timeout_graceful_shutdown=grace_s + FAREWELL_S)
    server = QuietServer(config, on_stopped, grace_s=grace_s, on_grace_over=on_grace_over)
    server.run(sockets=listeners)
    return server.ended_by


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
