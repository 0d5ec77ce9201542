"""A request for `n` choices: its choices decode side by side and are billed each.

Usage counts every choice's tokens, but the time from first token to last is one choice's: the
TPOT of the outcome, of the statistics and of telemetry divides by one choice's tokens, the
output-length history holds one choice's, and the ranking's cost counts `n` outputs.
"""

from __future__ import annotations

import random
import time

import pytest

from router.api.relay import ChoiceChunks
from router.execution.attempt import AttemptRecord
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.providers.base import chunk_event
from router.scoring import Candidate, ScoreRequest, ScoringConfig, predict, rank
from router.slo import SloTargets, SloTracker
from router.stats import LocalStatsStore, Observation
from tests.stats.sim import RecordingStore


def _streamed(start: float, completion_tokens: int, choices: int) -> Outcome:
    """A stream answered by `A`: first token after 0.1 s, last 1.9 s later (20 steps of 0.1 s
    for a choice of 20 tokens)."""
    attempt = AttemptRecord("A", 1, start, "first", "won", first_content_at=start + 0.1,
                            ended_at=start + 2.0)
    return Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                   arrived_at=start, task="chat", deployment="A", first_content_at=start + 0.1,
                   first_token_at=start + 0.1, last_token_at=start + 2.0, ended_at=start + 2.0,
                   prompt_tokens=10, completion_tokens=completion_tokens, choices=choices,
                   attempts=[attempt])


@pytest.mark.parametrize(("tokens", "choices", "per_choice"),
                         [(20, 1, 20), (80, 4, 20), (79, 4, 20), (3, 2, 2), (None, 3, None)])
def test_one_choices_tokens_are_the_mean_rounded_up(tokens: int | None, choices: int,
                                                    per_choice: int | None) -> None:
    outcome = _streamed(0.0, 0, choices)
    outcome.completion_tokens = tokens
    assert outcome.tokens_per_choice == per_choice


def test_tpot_of_n_choices_is_one_choices() -> None:
    """Four choices of 20 tokens over 1.9 s: TPOT 0.1 s, as for one choice (not 1.9 / 79)."""
    one, four = _streamed(0.0, 20, 1), _streamed(0.0, 80, 4)
    assert one.tpot_s == pytest.approx(0.1)
    assert four.tpot_s == pytest.approx(0.1)


def test_the_statistics_learn_one_choices_tpot_and_output_length() -> None:
    """What the sink records for a request of `n` choices is what it records for one."""
    recorded: dict[int, list[Observation]] = {}
    for choices in (1, 4):
        store = RecordingStore()
        StatsSink(store, SloTracker({})).record(
            _streamed(time.perf_counter(), 20 * choices, choices))
        recorded[choices] = store.seen
        assert store.seen
    for one, four in zip(recorded[1], recorded[4], strict=True):
        assert four.output_tokens == one.output_tokens == 20
        assert four.tpot_s == pytest.approx(one.tpot_s)


def test_a_streams_choices_of_unequal_length_are_timed_by_the_longest() -> None:
    """Four choices of 29, 17, 17 and 17 tokens (80 together), decoded side by side at 0.1 s a
    token: the span from first token to last is the longest choice's (28 steps), so TPOT is
    0.1 s by its tokens. The mean (20) read 28/19 times too slow, 0.147 s (30 of 40 `n` = 4
    answers over a TPOT target the deployment met: the feedback audit of 2026-12-07). The
    relay shares the usage's tokens out by each choice's content chunks."""
    outcome = _streamed(0.0, 80, 4)
    outcome.last_token_at = 0.1 + 2.8
    outcome.longest_choice_share = 29 / 80
    assert outcome.tokens_per_choice == 29
    assert outcome.tpot_s == pytest.approx(0.1)


def test_the_cost_of_n_choices_counts_n_outputs() -> None:
    """Prompt billed once, output `n` times; the cheapest deployment can change with `n`."""
    view = LocalStatsStore().view("A", "chat", 1000)
    cheap_in = Candidate("cheap-in", 1.0, 10.0, view)
    cheap_out = Candidate("cheap-out", 5.0, 1.0, view)
    config = ScoringConfig(objective="min_cost", explore_share=0.0)
    targets = SloTargets()
    for n, cheapest in ((1, "cheap-in"), (10, "cheap-out")):
        request = ScoreRequest("chat", "low", 1000, 100, True, n)
        cost = predict(cheap_in, request, 100, targets, config, now=0.0).cost_usd
        assert cost == pytest.approx((1000 * 1.0 + n * 100 * 10.0) / 1e6)
        ranking = rank(request, targets, [cheap_in, cheap_out], config, now=0.0,
                       rng=random.Random(0))
        assert ranking.candidates[0].deployment == cheapest


@pytest.mark.parametrize(("chunks", "share"), [
    # one choice a chunk, of 29, 17, 17 and 17 chunks
    ([[0]] * 29 + [[1]] * 17 + [[2]] * 17 + [[3]] * 17, 29 / 80),
    # every choice in each chunk (Gemini's candidates through litellm), 20 chunks
    ([[0, 1, 2, 3]] * 20, 0.25),
    # one choice only had content
    ([[0]] * 20, 1.0),
])
def test_each_choices_share_is_counted_from_the_chunks_that_carry_it(
        chunks: list[list[int]], share: float) -> None:
    """Read from the chunks a stream's choices came in, however a provider packs them: every
    choice in one chunk was counted for the last index only (its share 1.0, TPOT read `n`
    times too fast: the re-audit of 2026-12-07)."""
    counted = ChoiceChunks()
    for indexes in chunks:
        counted.add(chunk_event(b"{}", {"choices": [{"index": i, "delta": {"content": "x"}}
                                                    for i in indexes]}).content_indexes)
    assert counted.longest_share() == pytest.approx(share)
    assert ChoiceChunks().longest_share() is None
