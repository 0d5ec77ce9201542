"""The litellm adapter reuses its upstream connections.

litellm keys its cache of provider clients by the timeout it is given; the adapter gave it the
attempt's time left, a different number on every call, so every request built a new client,
connection pool and session (a soak counted ~650 upstream connections closed a minute at 25
req/s, and the clients litellm evicted stayed open for 15 minutes). It now gives litellm the
deployment's fixed timeout and bounds the attempt around the call. Against the simulator's
OpenAI and Anthropic wires, over real sockets: the connections this process holds to it after a
dozen calls, each with another time left, are counted from the kernel's table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bench.procstat import established_inodes, socket_inodes
from router.providers.base import Deployment, UpstreamCall
from tests.support.services import FAST_PROFILE, Running, start_simulator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from router.providers.litellm_adapter import LitellmProvider

pytestmark = pytest.mark.integration

CALLS = 12


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("reuse"), {"m": FAST_PROFILE})
    yield running
    running.stop()


def _connections_to(port: int) -> int:
    """This process's established TCP connections to `port`."""
    pid = os.getpid()
    return len(socket_inodes(pid) & established_inodes(pid, remote_port=port))


@pytest.mark.parametrize("model", ["openai/m", "anthropic/m"])
@pytest.mark.parametrize("stream", [False, True])
async def test_calls_with_different_time_left_share_connections(
        sim: Running, model: str, stream: bool) -> None:
    base = sim.base_url + ("/v1" if model.startswith("openai/") else "")
    deployment = Deployment(name=f"d-{model}-{stream}", model=model, adapter="litellm",
                            api_base=base, api_key="sim-key", input_price_per_mtok=1,
                            output_price_per_mtok=1, context_window=None)
    provider = LitellmProvider()
    port = int(sim.base_url.rsplit(":", 1)[1])
    before = _connections_to(port)
    for n in range(CALLS):
        call = UpstreamCall(deployment=deployment, timeout_s=5.0 + n * 0.37, body={
            "messages": [{"role": "user", "content": f"question {n}"}], "max_tokens": 8})
        if stream:
            events = [event async for event in provider.stream(call)]
            assert events
        else:
            assert (await provider.complete(call)).body
    opened = _connections_to(port) - before
    assert 1 <= opened <= 2, f"{opened} connections held after {CALLS} calls"
