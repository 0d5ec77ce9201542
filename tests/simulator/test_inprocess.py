"""The in-process entry point for benchmarks: `running_simulator` serves on the current loop."""

from __future__ import annotations

import httpx
import pytest

from router.providers.simulator import presets
from router.providers.simulator.server import running_simulator

pytestmark = pytest.mark.integration


async def test_running_simulator_serves_on_a_free_port_and_exposes_its_state() -> None:
    """An in-process simulator answers over HTTP and its counters are readable directly."""
    profiles = presets.profile_file({"m": presets.instant()})
    async with running_simulator(profiles, seed=1) as sim, httpx.AsyncClient() as http:
        response = await http.post(f"{sim.openai_base_url}/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
        completed = sim.state.models["m"].stats.completed
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 16
    assert completed == 1
