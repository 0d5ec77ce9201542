"""`bench/stack_floor.py`'s floor proxy and nginx relay a chat completion, whole and streamed, so
their figures are a real gateway's: the simulator's answer reaches an `openai` client through
them unchanged."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from bench.stack_floor import start_floor, start_nginx
from tests.support.procs import ManagedProcess
from tests.support.services import Running

ASKED: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something."}]


def _relayed(gateway: ManagedProcess, base: str) -> tuple[ChatCompletion, str]:
    """A whole answer and a streamed one's text through the gateway, which is then stopped."""
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0,
                               timeout=20)
        answer = client.chat.completions.create(model="fast", messages=ASKED)
        stream = client.chat.completions.create(model="fast", messages=ASKED, stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream
                           if chunk.choices)
    finally:
        gateway.stop()
    return answer, streamed


def test_the_floor_proxy_relays_the_simulators_answer_whole_and_streamed(
        sim: Running, tmp_path: Path) -> None:
    answer, streamed = _relayed(*start_floor(sim.base_url, tmp_path))
    assert answer.model == "fast"
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    assert streamed


def test_nginx_as_configured_for_the_floor_benchmark_relays_the_same_answer(
        sim: Running, tmp_path: Path) -> None:
    """The yardstick `bench.stack_floor` measures beside slorouter (`./dev test` installs nginx
    where it can; elsewhere this is skipped, and the benchmark says nginx was not measured)."""
    started = start_nginx(sim.base_url, tmp_path)
    if started is None:
        pytest.skip("nginx is not installed")
    answer, streamed = _relayed(*started)
    assert answer.model == "fast"
    assert answer.choices[0].message.content
    assert streamed
