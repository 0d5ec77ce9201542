"""The `slorouter sim` command: built-in profiles, a default profile for unknown names, and
refusal of a bad profile file."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from router.providers.simulator import presets
from router.providers.simulator.profile import load_profile_file
from tests.simulator.conftest import start_simulator
from tests.support.procs import VENV_BIN, ManagedProcess, free_port

pytestmark = pytest.mark.integration


def test_without_profile_the_builtin_demo_models_are_served(tmp_path: Path) -> None:
    """With no --profile, GET /v1/models lists exactly the built-in demo models."""
    port = free_port()
    process = ManagedProcess([str(VENV_BIN / "slorouter"), "sim", "--port", str(port)], port,
                             ready_url=f"http://127.0.0.1:{port}/healthz",
                             log_path=tmp_path / "sim.log").start()
    try:
        listed = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
    finally:
        process.stop()
    assert {m["id"] for m in listed["data"]} == set(load_profile_file().models)


def test_default_model_answers_unknown_names_with_its_profile(tmp_path: Path) -> None:
    """With a default model, any model name is served (and counted under its own name)."""
    models = {"base": presets.instant({"output_tokens_p50": 4, "output_tokens_p99": 4})}
    process, base_url = start_simulator(tmp_path, models, default_model="base")
    body = {"model": "made-up-name", "messages": [{"role": "user", "content": "x"}]}
    try:
        answer = httpx.post(f"{base_url}/v1/chat/completions", json=body).json()
        stats = httpx.get(f"{base_url}/control/stats").json()
    finally:
        process.stop()
    assert answer["model"] == "made-up-name" and answer["usage"]["completion_tokens"] == 4
    assert stats["models"]["made-up-name"]["completed"] == 1


def test_bad_profile_file_exits_with_code_2_and_names_the_problem(tmp_path: Path) -> None:
    """An invalid profile (unknown field) stops start-up with exit code 2 and a message."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  m:\n    ttft_ms: 5\n", encoding="utf-8")
    result = subprocess.run(
        [str(VENV_BIN / "slorouter"), "sim", "--port", "0", "--profile", str(bad)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "ttft_ms" in result.stderr


def test_a_bad_profile_file_is_one_line_a_problem_as_serve_lists_its_config(
        tmp_path: Path) -> None:
    """Every field problem on a line of its own, naming the file and the field, in the words
    `serve` uses for its config (a misspelt field gets the one it resembles); pydantic's own
    text (its error count, `[type=...]` codes, a URL per problem) was printed as it was."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  m:\n    ttft_ms: 5\n    ttft_p50_ms: soon\n", encoding="utf-8")
    result = subprocess.run(
        [str(VENV_BIN / "slorouter"), "sim", "--port", "0", "--profile", str(bad)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "slorouter sim: bad profile:",
        f"  - {bad}: models.m.ttft_p50_ms: Input should be a valid number, unable to parse "
        "string as a number",
        f"  - {bad}: models.m.ttft_ms: Extra inputs are not permitted: did you mean "
        "'ttft_p99_ms'?"], result.stderr


def test_a_taken_port_exits_with_code_3_and_one_line() -> None:
    """As `serve` does: a message naming the address, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(VENV_BIN / "slorouter"), "sim", "--port", str(port)],
            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr
