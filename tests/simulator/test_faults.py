"""Faults of a real simulator process: errors, hangs, cut streams and client cancellations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.simulator.conftest import Sim

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hello"}]
WAIT_LIMIT_S = 10.0


def client(sim: Sim, timeout: float = 30.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_url, api_key="k", max_retries=0, timeout=timeout)


def wait_for_stat(sim: Sim, model: str, check: Callable[[dict[str, Any]], bool]
                  ) -> dict[str, Any]:
    """Poll the model's counters until `check` holds (or give up after WAIT_LIMIT_S)."""
    deadline = time.monotonic() + WAIT_LIMIT_S
    stats = sim.control.model_stats(model)
    while not check(stats) and time.monotonic() < deadline:
        time.sleep(0.05)
        stats = sim.control.model_stats(model)
    return stats


def test_rate_limit_carries_retry_after_headers(sim: Sim) -> None:
    """A simulated 429 is a RateLimitError with Retry-After in seconds and milliseconds."""
    with pytest.raises(openai.RateLimitError) as caught:
        client(sim).chat.completions.create(model="rate-limited", messages=MESSAGES)
    headers = caught.value.response.headers
    assert headers["retry-after"] == "7" and headers["retry-after-ms"] == "7000"
    assert sim.control.model_stats("rate-limited")["errors"] == {"429": 1}


@pytest.mark.parametrize(("model", "status"), [("broken", 500), ("unavailable", 503)])
def test_server_errors_have_their_status_and_are_counted(sim: Sim, model: str, status: int
                                                          ) -> None:
    """500 and 503 faults reach the client as those statuses and count by kind."""
    with pytest.raises(openai.APIStatusError) as caught:
        client(sim).chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code == status
    assert sim.control.model_stats(model)["errors"] == {str(status): 1}


def test_hang_times_out_the_client_and_counts_hang_and_cancellation(sim: Sim) -> None:
    """A hung request never answers: the client times out, the simulator sees it leave."""
    with pytest.raises(openai.APITimeoutError):
        client(sim, timeout=0.5).chat.completions.create(model="hanging", messages=MESSAGES)
    stats = wait_for_stat(sim, "hanging", lambda s: s["cancellations"] == 1)
    assert stats["hangs"] == 1 and stats["cancellations"] == 1 and stats["in_flight"] == 0


def test_cut_stream_aborts_the_connection_mid_answer(sim: Sim) -> None:
    """An aborted stream delivers a few chunks and then fails; it is never a clean end."""
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        stream = client(sim).chat.completions.create(model="cut", messages=MESSAGES,
                                                     stream=True)
        received.extend(c.choices[0].delta.content or "" for c in stream if c.choices)
    stats = sim.control.model_stats("cut")
    assert len([r for r in received if r]) == 2
    assert stats["cut_streams"] == 1 and stats["completed"] == 0


def test_eof_cut_stream_ends_without_finish_reason_or_done(sim: Sim) -> None:
    """The eof cut mode closes the body cleanly but sends no finish chunk and no [DONE]."""
    body = {"model": "cut-eof", "messages": MESSAGES, "stream": True}
    response = httpx.post(f"{sim.openai_url}/chat/completions", json=body)
    assert response.status_code == 200
    assert "[DONE]" not in response.text and '"finish_reason":"stop"' not in response.text
    assert response.text.count('"content":"') == 3  # role chunk ("") plus two content chunks


def test_non_streaming_cut_drops_the_connection(sim: Sim) -> None:
    """A cut non-streaming request gets no response at all: a connection error."""
    with pytest.raises(openai.APIConnectionError):
        client(sim).chat.completions.create(model="cut", messages=MESSAGES)
    assert sim.control.model_stats("cut")["cut_streams"] == 1


def test_client_timeout_before_first_byte_counts_a_cancellation(sim: Sim) -> None:
    """A client that gives up while the answer is being prepared is counted as a cancellation."""
    with pytest.raises(openai.APITimeoutError):
        client(sim, timeout=0.3).chat.completions.create(model="slow", messages=MESSAGES)
    stats = wait_for_stat(sim, "slow", lambda s: s["cancellations"] == 1)
    assert stats["cancellations"] == 1 and stats["completed"] == 0 and stats["in_flight"] == 0


def test_client_closing_a_stream_midway_counts_a_cancellation(sim: Sim) -> None:
    """Closing a stream after the first content chunk cancels the simulated request."""
    stream = client(sim).chat.completions.create(model="slow-stream", messages=MESSAGES,
                                                 stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()
    stats = wait_for_stat(sim, "slow-stream", lambda s: s["cancellations"] == 1)
    assert stats["cancellations"] == 1 and stats["completed"] == 0 and stats["in_flight"] == 0
