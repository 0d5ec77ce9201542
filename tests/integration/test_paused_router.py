"""A router process stopped for longer than an attempt's timeout keeps the answers that came in
time, and does not blame a deployment for its own pause.

The pause audit of 2026-12-06 stopped a router (SIGSTOP, as a frozen container or a migrated VM
is) for 25 s while it waited on an upstream that answered after 8 s: each client got a 504
`first_token_timeout` for an answer the router held, and the deployment's breaker opened. The
re-audit found a one-poll grace enough for one request, not for twenty at once. Through the
litellm adapter, httpx's own read timeout inside litellm (an ordinary timer, armed at the
deployment's `timeout_s`) cut the same answers after the router's late timers had let them in
(the second re-audit); litellm is now given no read timeout: the attempt's own bounds it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.services import Running, gateway_and_simulator

# Exclusive: after the pause, ten requests are read and relayed within the late timers' 0.25 s
# grace, which another worker's load on the two cores can eat (one such run saw a 504).
pytestmark = [pytest.mark.integration, pytest.mark.exclusive]

AT_ONCE = 10


# Each upstream model through each adapter: the deployment and its model are named
# `<model><suffix>` (see `ADAPTERS`).
_ADAPTER_SUFFIXES = {"openai_passthrough": "", "litellm": "-ll"}


def _config(sim_base: str) -> str:
    names = [(model + suffix, model, adapter) for adapter, suffix in _ADAPTER_SUFFIXES.items()
             for model in ("slow", "hung")]
    deployments = "".join(
        f"\n  - {{name: {name}, model: openai/{model}, adapter: {adapter},"
        f" api_base: '{sim_base}/v1', api_key: env:SIM_KEY, input_price_per_mtok: 1,"
        f" output_price_per_mtok: 1, timeout_s: 3}}" for name, model, adapter in names)
    models = "".join(f"\n  - {{name: {name}, deployments: [{name}]}}" for name, _, _ in names)
    return f"""version: 1
deployments:{deployments}
models:{models}
routes: {{default_model: slow}}
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 0}}  # a retry after the pause would hide the cut
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    slow = {"ttft_p50_ms": 1000, "ttft_p99_ms": 1000, "output_tokens_p50": 4,
            "output_tokens_p99": 4}
    hung = {**slow, "ttft_p50_ms": 20000, "ttft_p99_ms": 20000}
    with gateway_and_simulator(tmp_path_factory.mktemp("paused"), {"slow": slow, "hung": hung},
                               _config, env={"SIM_KEY": "sk-sim"}) as (router, sim):
        _ask(router.base_url, "slow-ll", False, 0)  # litellm builds its client on a first call
        yield router, sim


def _ask(base_url: str, model: str, stream: bool, n: int) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/chat/completions", timeout=30,
                      json={"model": model, "max_tokens": 4, "stream": stream,
                            "messages": [{"role": "user", "content": f"hello {n}"}]})


def _in_flight(sim: Running, model: str) -> int:
    """The simulator's requests of `model` waiting on it now."""
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()
    return int(stats["models"].get(model, {}).get("in_flight", 0))


def _paused_while_asked(stack: tuple[Running, Running], model: str,
                        stream: bool) -> list[httpx.Response]:
    """`AT_ONCE` requests sent together, the router stopped for 4 s (past the attempts' 3 s
    timeout) once every one of them waits on the simulator. Not a fixed 0.3 s in: on a slow
    machine litellm had not yet connected some of them, and a connection opened during the
    pause is not what this tests (httpx's connect timer, an ordinary one, cut it)."""
    gateway, sim = stack
    upstream_model = model.removesuffix(_ADAPTER_SUFFIXES["litellm"])
    before = _in_flight(sim, upstream_model)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        asked = [pool.submit(_ask, gateway.base_url, model, stream, n) for n in range(AT_ONCE)]
        waited = time.monotonic() + 10
        while (_in_flight(sim, upstream_model) < before + AT_ONCE
               and time.monotonic() < waited):
            time.sleep(0.02)
        assert _in_flight(sim, upstream_model) >= before + AT_ONCE, "not all reached upstream"
        os.kill(gateway.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(4.0)
        finally:
            os.kill(gateway.proc.pid, signal.SIGCONT)
        return [a.result(timeout=30) for a in asked]


def _breaker(gateway: Running, name: str) -> dict[str, object]:
    health = httpx.get(f"{gateway.base_url}/v1/health/deployments", timeout=10).json()
    return next(d for d in health["deployments"] if d["deployment"] == name)


ADAPTERS = pytest.mark.parametrize("suffix", list(_ADAPTER_SUFFIXES.values()),
                                   ids=list(_ADAPTER_SUFFIXES))


@ADAPTERS
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_answers_that_came_during_a_pause_are_delivered(stack: tuple[Running, Running],
                                                        stream: bool, suffix: str) -> None:
    gateway = stack[0]
    answers = _paused_while_asked(stack, "slow" + suffix, stream)
    assert [a.status_code for a in answers] == [200] * AT_ONCE, [a.text for a in answers]
    if stream:
        assert all("[DONE]" in a.text and '"error"' not in a.text for a in answers)
    breaker = _breaker(gateway, "slow" + suffix)
    assert breaker["state"] == "closed" and breaker["consecutive_failures"] == 0, breaker


@ADAPTERS
def test_a_timeout_the_pause_made_late_is_no_verdict_on_the_deployment(
        stack: tuple[Running, Running], suffix: str) -> None:
    """An upstream that had not answered either: the attempts time out (504), but the process
    stood still, not only the upstream: its breaker counts none of them."""
    gateway = stack[0]
    answers = _paused_while_asked(stack, "hung" + suffix, stream=False)
    assert [a.status_code for a in answers] == [504] * AT_ONCE, [a.text for a in answers]
    breaker = _breaker(gateway, "hung" + suffix)
    assert breaker["state"] == "closed" and breaker["consecutive_failures"] == 0, breaker
