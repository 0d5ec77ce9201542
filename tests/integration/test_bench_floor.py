"""`bench/stack_floor.py`'s floor proxy relays a chat completion, so its figures are a real
gateway's: the simulator's answer reaches an `openai` client through it unchanged."""

from __future__ import annotations

from pathlib import Path

import openai

from bench.stack_floor import start_floor
from tests.support.services import Running


def test_the_floor_proxy_relays_the_simulators_answer(sim: Running, tmp_path: Path) -> None:
    floor, base = start_floor(sim.base_url, tmp_path)
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0,
                               timeout=20)
        answer = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Say something."}])
    finally:
        floor.stop()
    assert answer.model == "fast"
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0
