"""Start the provider simulator and the router as real processes for integration tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import PYTHON, ManagedProcess, free_port

# One pinned model on an address nothing listens on: for tests of the process, not of routing.
MINIMAL_CONFIG = """version: 1
deployments:
  - {name: d, model: openai/m, adapter: openai_passthrough, api_base: http://127.0.0.1:9/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}
models: [{name: m, deployments: [d]}]
routes: {default_model: m}
"""


@dataclass
class Running:
    proc: ManagedProcess
    base_url: str

    def stop(self) -> None:
        self.proc.stop()


def start_simulator(directory: Path, models: dict[str, dict[str, Any]],
                    name: str = "sim") -> Running:
    """`slorouter sim` with the given profiles (simulator profile file format)."""
    profile = directory / f"{name}-profile.json"
    profile.write_text(json.dumps({"models": models}))
    port = free_port()
    argv = [PYTHON, "-m", "router.cli", "sim", "--port", str(port), "--profile", str(profile)]
    proc = ManagedProcess(argv, port, ready_url=f"http://127.0.0.1:{port}/v1/models",
                          log_path=directory / f"{name}.log", warm=True).start()
    return Running(proc, f"http://127.0.0.1:{port}")


# A quick model and the same one failing every request, for tests of what the router reports.
FAST_PROFILE = {"ttft_p50_ms": 5, "ttft_p99_ms": 10, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
                "output_tokens_p50": 12, "output_tokens_p99": 20, "tokens_per_chunk": 2}


def start_fast_and_broken(directory: Path) -> Running:
    """The simulator with models `fast` and `broken` (HTTP 500 every time)."""
    return start_simulator(directory, {"fast": FAST_PROFILE,
                                       "broken": {**FAST_PROFILE, "error_rate_500": 1.0}})


def start_router(directory: Path, config_yaml: str, env: dict[str, str] | None = None,
                 name: str = "router", extra_args: tuple[str, ...] = (),
                 warm: bool = True) -> Running:
    """`slorouter serve --config` on a free loopback port: forked from the warm launcher, or
    (`warm=False`) started from scratch by this process, for tests of how the command starts
    and what it inherits (signal dispositions)."""
    config = directory / f"{name}.yaml"
    config.write_text(config_yaml)
    port = free_port()
    argv = [PYTHON, "-m", "router.cli", "serve", "--config", str(config), "--port", str(port),
            *extra_args]
    # Run in the test's directory so state the router writes (the disk cache) stays there.
    proc = ManagedProcess(argv, port, ready_url=f"http://127.0.0.1:{port}/healthz", env=env,
                          log_path=directory / f"{name}.log", startup_timeout_s=60,
                          cwd=directory, warm=warm).start()
    return Running(proc, f"http://127.0.0.1:{port}")


@contextlib.contextmanager
def simulated_gateway(directory: Path, models: dict[str, dict[str, Any]],
                      config: Callable[[str], str], env: dict[str, str]) -> Iterator[Running]:
    """The simulator serving `models` and a router on it (`config(simulator base URL)`); both
    are stopped at the end, the simulator also when the router fails to start."""
    with gateway_and_simulator(directory, models, config, env) as (router, _):
        yield router


@contextlib.contextmanager
def gateway_and_simulator(directory: Path, models: dict[str, dict[str, Any]],
                          config: Callable[[str], str], env: dict[str, str] | None = None,
                          extra_args: tuple[str, ...] = ()
                          ) -> Iterator[tuple[Running, Running]]:
    """As `simulated_gateway`, yielding the simulator too (its control API, its counters)."""
    with contextlib.ExitStack() as started:
        sim = start_simulator(directory, models)
        started.callback(sim.stop)
        router = start_router(directory, config(sim.base_url), env=env, extra_args=extra_args)
        started.callback(router.stop)
        yield router, sim


def finished_requests(log: Path | None) -> list[dict[str, Any]]:
    """The `request_finished` events of a router's log so far (`Running.proc.log_path`; it
    runs with `--access-log` or `--log-level debug`), in order; whole lines only, as it may be
    writing the last."""
    assert log is not None, "the router was started without a log"
    events = []
    for line in log.read_text(errors="replace").splitlines(keepends=True):
        if line.startswith("{") and line.endswith("\n") and '"request_finished"' in line:
            event = json.loads(line)
            if event.get("event") == "request_finished":
                events.append(event)
    return events


@contextlib.contextmanager
def observed_gateway(directory: Path, models: dict[str, dict[str, Any]],
                     config: Callable[[str], str], env: dict[str, str]
                     ) -> Iterator[tuple[Running, Path]]:
    """The simulator serving `models` and a router on it (`config(simulator base URL)`) that
    logs at DEBUG and prints every span to its log; yields the router and its log's path.
    Both are stopped at the end, the simulator also when the router fails to start."""
    with contextlib.ExitStack() as started:
        sim = start_simulator(directory, models)
        started.callback(sim.stop)
        router = start_router(directory, config(sim.base_url),
                              env={**env, "SLOROUTER_TELEMETRY_EXPORTER": "console",
                                   "SLOROUTER_TELEMETRY_SAMPLE_RATIO": "1.0"},
                              extra_args=("--log-level", "debug"))
        started.callback(router.stop)
        yield router, directory / "router.log"
