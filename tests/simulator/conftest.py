"""Fixtures of the simulator tests: one real `slorouter sim` process per test session.

The process serves the `MODELS` below from a profile file written for it; every test starts
from the loaded profiles, zeroed counters and empty prefix caches (`sim` resets them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from router.providers.simulator import presets
from router.providers.simulator.client import SimulatorControl
from router.providers.simulator.profile import ModelProfile
from tests.support.procs import VENV_BIN, ManagedProcess, free_port

MODELS: dict[str, ModelProfile] = {
    "instant": presets.instant(),
    "steady": presets.steady(ttft_ms=50, tpot_ms=2, output_tokens=20),
    "slow": presets.steady(ttft_ms=5000, tpot_ms=5, output_tokens=20),
    "slow-stream": presets.steady(ttft_ms=0, tpot_ms=400, output_tokens=50),
    "chunky": presets.instant({"tokens_per_chunk": 3, "output_tokens_p50": 10,
                               "output_tokens_p99": 10}),
    "quiz": presets.instant({"accuracy": 0.7}),
    "rate-limited": presets.instant({"error_rate_429": 1.0, "retry_after_s": 7}),
    "broken": presets.instant({"error_rate_500": 1.0}),
    "unavailable": presets.instant({"error_rate_503": 1.0}),
    "hanging": presets.instant({"hang_rate": 1.0}),
    "cut": presets.instant({"cut_rate": 1.0, "cut_after_chunks": 2}),
    "cut-eof": presets.instant({"cut_rate": 1.0, "cut_after_chunks": 2, "cut_mode": "eof"}),
    "prefix": presets.steady(ttft_ms=400, changes={"prefix_cache_factor": 0.25}),
    "single-slot": presets.steady(ttft_ms=300, changes={"max_concurrency": 1}),
    "small-window": presets.instant({"context_window": 64}),
}


@dataclass(frozen=True)
class Sim:
    """A running simulator: base URL without `/v1`, its OpenAI base URL, and its control client."""

    base_url: str
    control: SimulatorControl

    @property
    def openai_url(self) -> str:
        return f"{self.base_url}/v1"


def start_simulator(directory: Path, models: dict[str, ModelProfile], seed: int = 7,
                    default_model: str | None = None) -> tuple[ManagedProcess, str]:
    """Start `slorouter sim` on a free port with these models; returns the process and base URL."""
    profile = presets.write_profile_file(directory / "profiles.json", models, default_model)
    port = free_port()
    argv = [str(VENV_BIN / "slorouter"), "sim", "--port", str(port), "--profile", str(profile),
            "--seed", str(seed)]
    base_url = f"http://127.0.0.1:{port}"
    process = ManagedProcess(argv, port, ready_url=f"{base_url}/healthz",
                             log_path=directory / "sim.log")
    return process.start(), base_url


@pytest.fixture(scope="session")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    process, base_url = start_simulator(tmp_path_factory.mktemp("sim"), MODELS)
    control = SimulatorControl(base_url)
    try:
        yield Sim(base_url, control)
    finally:
        control.close()
        process.stop()


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    sim_process.control.reset()
    return sim_process
