"""`slorouter experiments report NAME [--plot out.png]` against the running service.

The console script is run as a real process against the package's router: it reads
`GET /v1/experiments?name=NAME`, prints the table and draws the PNG. Traffic is sent to the
`ttft` experiment first so the table has numbers; `idle` has never had traffic.
"""

from __future__ import annotations

import asyncio
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from tests.experiments_service.support import (
    API_KEY,
    client,
    gather_limited,
    report,
    requests_by_arm,
    send,
)
from tests.support.procs import VENV_BIN
from tests.support.services import Running

pytestmark = pytest.mark.integration

REQUESTS = 60


def _slorouter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "slorouter"), *args], capture_output=True, text=True,
                          timeout=120, check=False)


async def _traffic_then_report(base_url: str) -> dict[str, Any]:
    async with client(base_url) as http:
        await gather_limited([partial(send, http, "chat", f"cli-{i}") for i in range(REQUESTS)],
                             8)
        await asyncio.sleep(0.3)  # outcome records are written just after each response
        return await report(http, "ttft")


@pytest.fixture(scope="module")
def ttft_json(gateway: Running) -> dict[str, Any]:
    return asyncio.run(_traffic_then_report(gateway.base_url))


def test_report_prints_the_table_and_draws_the_png(gateway: Running, ttft_json: dict[str, Any],
                                                   tmp_path: Path) -> None:
    """Exit 0; the table shows each arm with the service's counts; the PNG has both panels."""
    out = tmp_path / "ttft.png"
    done = _slorouter("experiments", "report", "ttft", "--url", gateway.base_url,
                      "--api-key", API_KEY, "--plot", str(out))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    print("\n" + text)
    for heading in ("experiment ttft", "differences vs control", "always-valid tests",
                    f"plot written to {out}"):
        assert heading in text
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():  # the first table (arms); later ones also start with "fast"
        if line.startswith(("control (control)", "fast ")):
            rows.setdefault(line.split()[0], line.split())
    counts = requests_by_arm(ttft_json)
    assert rows["control"][3] == str(counts["control"])  # name, "(control)", share, requests
    assert rows["fast"][2] == str(counts["fast"])
    assert sum(counts.values()) >= REQUESTS
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(out).shape[:2]
    assert width > 2 * height > 0  # two panels side by side


def test_report_of_an_experiment_without_traffic_still_works(gateway: Running,
                                                             tmp_path: Path) -> None:
    """An experiment nobody has reached yet: exit 0, zero requests per arm, a PNG."""
    out = tmp_path / "idle.png"
    done = _slorouter("experiments", "report", "idle", "--url", gateway.base_url,
                      "--api-key", API_KEY, "--plot", str(out))
    assert done.returncode == 0, done.stderr
    assert "experiment idle" in done.stdout and "halts: none" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_an_unknown_experiment_exits_1_with_a_message(gateway: Running) -> None:
    """A name no experiment has: exit 1 and a message naming it."""
    done = _slorouter("experiments", "report", "no-such", "--url", gateway.base_url,
                      "--api-key", API_KEY)
    assert done.returncode == 1
    assert "no experiment named 'no-such'" in done.stderr


def test_report_with_a_wrong_key_or_no_server_exits_2(gateway: Running) -> None:
    """A rejected key: exit 2 and the server's own message (what to fix); an unreachable
    server: exit 2 and `cannot read <url>`."""
    wrong = _slorouter("experiments", "report", "ttft", "--url", gateway.base_url,
                       "--api-key", "sk-wrong")
    assert wrong.returncode == 2, wrong.stderr
    assert (f"{gateway.base_url} refused the request (HTTP 401): invalid API key"
            in wrong.stderr), wrong.stderr
    gone = _slorouter("experiments", "report", "ttft", "--url", "http://127.0.0.1:9")
    assert gone.returncode == 2 and "cannot read http://127.0.0.1:9" in gone.stderr
