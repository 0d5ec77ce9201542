"""A stream that ended without the provider's usage (its client left, a timeout cut it, a
provider that sends none) is filed by what the router knows of it.

Its prompt is the router's estimate (the one the decision read), not 0 tokens: filed at 0, a
long prompt's slow first token taught the short prompts' bucket that the deployment was slow,
and short prompts left a deployment that was fast for them. And it has no TPOT: its chunks
were counted, not its tokens, and a provider sending 4 tokens a chunk read 4 times slower
(30 of 30 TPOT events bad where the deployment met its target). The feedback audit of
2026-12-07.
"""

from __future__ import annotations

import time

from router.execution.attempt import AttemptRecord
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.slo import SloTracker
from tests.stats.sim import RecordingStore


def _left_early(start: float) -> Outcome:
    """An 8,000-token prompt's stream, its client gone after 10 chunks of 4 tokens."""
    attempt = AttemptRecord("A", 1, start, "first", "won", first_content_at=start + 2.5,
                            ended_at=start + 3.3, abandoned=True)
    return Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                   arrived_at=start, task="chat", deployment="A", first_content_at=start + 2.5,
                   first_token_at=start + 2.5, last_token_at=start + 3.2, ended_at=start + 3.3,
                   prompt_estimate=8000, completion_tokens=10, chunks_counted=True,
                   client_disconnected=True, status=499, attempts=[attempt])


def test_a_stream_without_usage_is_filed_under_the_prompt_estimate_without_tpot() -> None:
    store = RecordingStore()
    outcome = _left_early(time.perf_counter())
    StatsSink(store, SloTracker({})).record(outcome)
    assert store.seen
    for observation in store.seen:
        assert observation.prompt_tokens == 8000
        assert observation.tpot_s is None
        assert observation.ttft_s is not None and abs(observation.ttft_s - 2.5) < 1e-6
    assert outcome.tpot_s is None


def test_the_providers_count_wins_over_the_estimate() -> None:
    store = RecordingStore()
    outcome = _left_early(time.perf_counter())
    outcome.prompt_tokens = 7900
    StatsSink(store, SloTracker({})).record(outcome)
    assert {o.prompt_tokens for o in store.seen} == {7900}
