"""A stream of a task its deployment has barely answered is hedged at the deployment's TTFT
model, at the request's prompt size, when that model has seen prompts of about that size."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from router.feedback import HedgeDelays
from router.stats import LocalStatsStore, Observation, StatsConfig
from router.stats.ttft_model import TtftModel

NOW = 1_000.0


def _store() -> LocalStatsStore:
    return LocalStatsStore(StatsConfig(), clock=lambda: NOW)  # every weight read at one time


def _answer(store: LocalStatsStore, task: str, prompt_tokens: int, ttft_s: float,
            streamed: bool = True) -> None:
    store.record(Observation(deployment="d", task=task, prompt_tokens=prompt_tokens,  # type: ignore[arg-type]
                             output_tokens=5, ttft_s=ttft_s, tpot_s=0.01, e2e_s=ttft_s + 0.05,
                             queue_s=0.0, error=None, cached=False, t=NOW, streamed=streamed))


def _body_and_tail(store: LocalStatsStore, task: str, prompt_tokens: int, answers: int,
                   seed: int = 7) -> None:
    """`answers` first tokens: 95% near 100 ms, 5% near 1 s (p88 in the body)."""
    rng = random.Random(seed)
    for _ in range(answers):
        tail = rng.random() < 0.05
        _answer(store, task, prompt_tokens, rng.uniform(0.9, 1.1) if tail
                else rng.uniform(0.08, 0.12))


def test_a_cold_task_is_hedged_at_the_delay_its_deployment_shows_for_other_tasks() -> None:
    """`chat` has 200 answers on `d`, `summarization` none: a summarization stream of the
    same prompt size is hedged near chat's own delay (both below the tail), not never."""
    store = _store()
    _body_and_tail(store, "chat", 120, 200)
    delays = HedgeDelays(store)
    own = delays("d", "chat", 120)
    cold = delays("d", "summarization", 120)
    assert own is not None and cold is not None
    assert 0.09 < own < 0.2 and 0.09 < cold < 0.2, (own, cold)
    assert abs(cold - own) < 0.25 * own


def test_a_prompt_far_longer_than_the_model_has_seen_is_not_hedged_on_it() -> None:
    """The line was fitted on 120-token prompts only: at 4,000 tokens it says nothing (a
    long-prompt task would be hedged at short prompts' delay), so no hedge until the task's
    own answers back one."""
    store = _store()
    _body_and_tail(store, "chat", 120, 200)
    delays = HedgeDelays(store)
    assert delays("d", "summarization", 4_000) is None
    assert delays("d", "summarization", 130) is not None  # about the same size: trusted


def test_a_line_fitted_over_a_range_of_sizes_hedges_within_it_at_its_size() -> None:
    """Prefill grows with the prompt: fitted on 500-8,000 tokens at 20 ms + 50 ms per 1k, a
    cold task's 6,000-token stream waits about the line's 320 ms, a 1,000-token one 70 ms."""
    store = _store()
    rng = random.Random(3)
    for _ in range(400):
        size = rng.randint(500, 8_000)
        _answer(store, "chat", size, (0.02 + 0.05 * size / 1000) * rng.uniform(0.9, 1.1))
    delays = HedgeDelays(store)
    long, short = delays("d", "extraction", 6_000), delays("d", "extraction", 1_000)
    assert long is not None and short is not None
    assert 0.3 < long < 0.4 and 0.06 < short < 0.09, (long, short)


def test_the_tasks_own_answers_win_once_they_back_a_delay() -> None:
    """`summarization` answers 30 times at 500 ms on a deployment whose chat answers take
    100 ms: its own sketch sets its delay, not the deployment's mixture."""
    store = _store()
    _body_and_tail(store, "chat", 120, 300)
    for _ in range(30):
        _answer(store, "summarization", 120, 0.5)
    delay = HedgeDelays(store)("d", "summarization", 120)
    assert delay is not None and 0.45 < delay < 0.55, delay


def test_too_few_answers_on_the_deployment_back_no_delay() -> None:
    """Ten answers on the deployment are ten residuals or fewer: under the 20 required."""
    store = _store()
    _body_and_tail(store, "chat", 120, 10)
    assert HedgeDelays(store)("d", "summarization", 120) is None


def test_a_non_streamed_request_has_no_fallback() -> None:
    """A non-streamed request waits for its whole answer, whose length the TTFT model does not
    know: a task without its own non-streamed answers is not hedged."""
    store = _store()
    _body_and_tail(store, "chat", 120, 200)
    for _ in range(200):
        _answer(store, "chat", 120, 0.1, streamed=False)
    delays = HedgeDelays(store)
    assert delays("d", "chat", 120, stream=False) is not None
    assert delays("d", "summarization", 120, stream=False) is None


@settings(max_examples=60, deadline=None)
@given(points=st.lists(st.tuples(st.integers(1, 20_000), st.floats(0.005, 5.0)),
                       min_size=2, max_size=60),
       prompt=st.integers(1, 20_000))
def test_quantiles_at_agree_with_the_fits_prediction_at_the_summary_levels(
        points: list[tuple[int, float]], prompt: int) -> None:
    """`quantiles_at` (the hedge's read, any level) gives what the fit the scorer reads
    predicts at its fixed levels, wherever the line is trusted, and nothing elsewhere."""
    from router.stats.decay import Decay
    from router.stats.quantiles import LEVELS

    model = TtftModel(Decay(5.0), 0.01)
    for size, ttft in points:
        model.add(size, ttft, NOW)
    fit = model.fit(NOW)
    assert fit is not None
    found, weight = model.quantiles_at(prompt, LEVELS, NOW, 0.8)
    predicted = fit.predict(prompt)
    if fit.trust(prompt) < 0.8 or predicted is None:
        assert found is None
        return
    assert found is not None
    assert weight == model.ratio.count(NOW)
    for level, value in zip(LEVELS, found, strict=True):
        assert abs(value - predicted.at(level)) <= 1e-9 * max(value, 1.0)
