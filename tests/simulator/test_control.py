"""Run-time control of a real simulator: profile changes, added models, capacity, prefix cache,
expect-marker accuracy and the counters of `/control/stats`."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from router.providers.simulator import presets
from tests.simulator.conftest import MODELS, Sim

pytestmark = pytest.mark.integration

SYSTEM = {"role": "system", "content": "You are a support agent. " * 40}


def client(sim: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_url, api_key="k", max_retries=0)


def timed(sim: Sim, model: str) -> float:
    started = time.monotonic()
    client(sim).chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    return time.monotonic() - started


def test_raising_ttft_mid_run_slows_the_next_request(sim: Sim) -> None:
    """After POST /control/models/steady sets TTFT to 1.5 s, a request takes at least that."""
    before = timed(sim, "steady")
    sim.control.set_profile("steady", {"ttft_p50_ms": 1500, "ttft_p99_ms": 1500})
    after = timed(sim, "steady")
    assert before < 1.0
    assert after >= 1.5


def test_unknown_profile_field_is_rejected_with_422(sim: Sim) -> None:
    """Profile changes are validated: an unknown field or a bad value is a 422."""
    unknown = httpx.post(f"{sim.base_url}/control/models/steady", json={"ttft_ms": 5})
    negative = httpx.post(f"{sim.base_url}/control/models/steady", json={"hang_rate": 2})
    assert unknown.status_code == 422 and negative.status_code == 422
    assert sim.control.profiles()["models"]["steady"]["ttft_p50_ms"] == MODELS[
        "steady"].ttft_p50_ms


@pytest.mark.parametrize("change", [{"retry_after_s": "inf"}, {"ttft_p99_ms": "Infinity"},
                                    {"error_delay_ms": "nan"}, {"retry_after_s": 1e300}])
def test_an_infinite_or_absurd_number_is_rejected_with_422(
        sim: Sim, change: dict[str, object]) -> None:
    """An infinite `retry_after_s` was taken, and every request to the model was then a bare
    500 (the `Retry-After` header could not be written); an infinite TTFT a hang never counted
    as one. Finite numbers only, and a `Retry-After` of at most a day."""
    response = httpx.post(f"{sim.base_url}/control/models/steady", json=change)
    assert response.status_code == 422, response.text
    assert sim.control.profiles()["models"]["steady"]["ttft_p99_ms"] == MODELS[
        "steady"].ttft_p99_ms


def test_patching_an_unknown_model_is_404(sim: Sim) -> None:
    """Only existing models can be changed; new ones are added with POST /control/models."""
    response = httpx.post(f"{sim.base_url}/control/models/nope", json={"accuracy": 1})
    assert response.status_code == 404


def test_added_model_serves_and_reset_removes_it(sim: Sim) -> None:
    """A model added from a base profile answers at once; a reset restores the loaded set."""
    sim.control.add_model("replica-b", {"output_tokens_p50": 3, "output_tokens_p99": 3},
                          base="instant")
    response = client(sim).chat.completions.create(
        model="replica-b", messages=[{"role": "user", "content": "x"}])
    sim.control.reset()
    assert response.usage is not None and response.usage.completion_tokens == 3
    assert "replica-b" not in sim.control.profiles()["models"]


def test_reset_restores_loaded_profile(sim: Sim) -> None:
    """POST /control/reset puts a changed profile back to the loaded one."""
    sim.control.set_profile("instant", {"error_rate_500": 1.0})
    sim.control.reset()
    response = client(sim).chat.completions.create(
        model="instant", messages=[{"role": "user", "content": "x"}])
    assert response.choices[0].message.content


def test_stats_count_requests_completions_and_tokens(sim: Sim) -> None:
    """Counters follow what was served."""
    for text in ("a", "b", "c"):
        client(sim).chat.completions.create(model="steady",
                                            messages=[{"role": "user", "content": text}])
    stats = sim.control.model_stats("steady")
    assert (stats["requests"], stats["completed"], stats["in_flight"]) == (3, 3, 0)
    assert stats["completion_tokens"] == 60


def test_repeated_prefix_hits_the_prefix_cache_and_cuts_ttft(sim: Sim) -> None:
    """A second request sharing the system prompt is a prefix hit with TTFT x0.25 and
    cached tokens reported in usage."""
    api = client(sim)
    first = api.chat.completions.with_raw_response.create(
        model="prefix", messages=[SYSTEM, {"role": "user", "content": "first question"}])
    second = api.chat.completions.with_raw_response.create(
        model="prefix", messages=[SYSTEM, {"role": "user", "content": "second question"}])
    usage = second.parse().usage
    assert first.headers["x-sim-prefix-cache"] == "miss"
    assert second.headers["x-sim-prefix-cache"] == "hit"
    assert float(second.headers["x-sim-ttft-ms"]) == pytest.approx(
        0.25 * float(first.headers["x-sim-ttft-ms"]))
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens > 0
    assert sim.control.model_stats("prefix")["prefix_cache"]["recent_hits"] == 1


def test_the_prefix_cache_is_shared_only_between_requests_with_the_same_cache_salt(
        sim: Sim) -> None:
    """As vLLM's: a prefix cached under one `cache_salt` is a miss under another and without
    one, a hit under the same salt; an empty salt is refused with a 400."""
    api = client(sim)
    system = {"role": "system", "content": "You are the salted support bot. " * 20}

    def cached(question: str, salt: str | None) -> int:
        usage = api.chat.completions.create(
            model="prefix", messages=[system, {"role": "user", "content": question}],
            extra_body={"cache_salt": salt} if salt is not None else None).usage
        assert usage is not None and usage.prompt_tokens_details is not None
        return usage.prompt_tokens_details.cached_tokens or 0

    assert cached("one", "salt-a") == 0
    assert (cached("two", "salt-b"), cached("three", None)) == (0, 0)
    assert cached("four", "salt-a") > 0 and cached("five", None) > 0
    with pytest.raises(openai.BadRequestError):
        cached("six", "")


async def test_capacity_queues_requests_beyond_the_limit(sim: Sim) -> None:
    """With one slot and 300 ms TTFT, three concurrent requests queue: the last waits >= 0.5 s."""
    api = openai.AsyncOpenAI(base_url=sim.openai_url, api_key="k", max_retries=0)
    calls = [api.chat.completions.with_raw_response.create(
        model="single-slot", messages=[{"role": "user", "content": str(i)}]) for i in range(3)]
    responses = await asyncio.gather(*calls)
    await api.close()
    queued_ms = sorted(float(r.headers["x-sim-queue-ms"]) for r in responses)
    assert queued_ms[0] < 250
    assert queued_ms[2] >= 500


async def test_expect_marker_is_answered_right_with_the_profile_accuracy(sim: Sim) -> None:
    """Over 300 prompts, a model with accuracy 0.7 answers VALUE exactly 60-80% of the time,
    and the same prompt always gets the same answer."""
    api = openai.AsyncOpenAI(base_url=sim.openai_url, api_key="k", max_retries=0)

    async def answer(i: int) -> str:
        prompt = f"Question {i}: what is 6 x 7? <<expect:42>>"
        response = await api.chat.completions.create(
            model="quiz", messages=[{"role": "user", "content": prompt}])
        return response.choices[0].message.content or ""

    answers = await asyncio.gather(*(answer(i) for i in range(300)))
    again = await asyncio.gather(*(answer(i) for i in range(20)))
    await api.close()
    share = sum(a == "42" for a in answers) / len(answers)
    assert 0.6 <= share <= 0.8
    assert list(again) == list(answers[:20])
    assert all(a.strip().isdigit() for a in answers)


def test_accuracy_one_and_zero_are_always_right_and_always_wrong(sim: Sim) -> None:
    """Accuracy 1 always answers the expected value; accuracy 0 never does."""
    messages = [{"role": "user", "content": "Pick one. <<expect:B>>"}]
    sim.control.set_profile("quiz", {"accuracy": 1.0})
    right = client(sim).chat.completions.create(model="quiz", messages=messages)
    sim.control.set_profile("quiz", {"accuracy": 0.0})
    wrong = client(sim).chat.completions.create(model="quiz", messages=messages)
    assert right.choices[0].message.content == "B"
    assert wrong.choices[0].message.content in {"A", "C", "D"}


def test_added_model_is_listed_and_unknown_names_stay_404(sim: Sim) -> None:
    """A model added through the control API is listed; without a default profile, unknown
    names are 404 and counted."""
    sim.control.add_model("fast-clone", presets.instant({"output_tokens_p50": 2,
                                                         "output_tokens_p99": 2}))
    names = {m.id for m in client(sim).models.list()}
    with pytest.raises(openai.NotFoundError):
        client(sim).chat.completions.create(model="other",
                                            messages=[{"role": "user", "content": "x"}])
    assert "fast-clone" in names
    assert sim.control.stats()["unknown_model_requests"] == 1
