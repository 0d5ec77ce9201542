"""`bench/stack_floor.py`'s floor proxy and nginx relay a chat completion, so their figures are
a real gateway's: the simulator's answer reaches an `openai` client through them unchanged."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from bench.stack_floor import start_floor, start_nginx
from tests.support.services import Running


def test_the_floor_proxy_relays_the_simulators_answer_whole_and_streamed(
        sim: Running, tmp_path: Path) -> None:
    floor, base = start_floor(sim.base_url, tmp_path)
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0,
                               timeout=20)
        answer = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Say something."}])
        stream = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Say something."}], stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream
                           if chunk.choices)
    finally:
        floor.stop()
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
    nginx, base = started
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0,
                               timeout=20)
        answer = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Say something."}])
        stream = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Say something."}], stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream
                           if chunk.choices)
    finally:
        nginx.stop()
    assert answer.model == "fast"
    assert answer.choices[0].message.content
    assert streamed
