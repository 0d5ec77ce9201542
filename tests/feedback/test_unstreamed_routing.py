"""Streamed requests go where first tokens come soonest, non-streamed ones where whole answers
do, when the two are different deployments (docs/latency-feedback.md §3, §4, §7).

A gives its first token in ~100 ms but writes slowly (100 tokens in ~2.1 s); B gives its first
token in ~400 ms and writes fast (~0.6 s). Equal price, SLO TTFT p95 <= 1 s, `min_cost`; half
the requests stream. A stream is best served by A (both meet the target, A sooner), a
non-streamed request by B (its first content is the whole answer). Before, a non-streamed
answer's whole time went into its deployment's TTFT statistics: A's TTFT p95 read ~2 s, A
missed the target, and streams went to B too (and non-streamed requests were ranked on that
mixed TTFT).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.feedback import scenarios as sc
from tests.feedback.conftest import StartRouter, StartSim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

A, B = sc.Dep("dep-a", "model-a"), sc.Dep("dep-b", "model-b")
RATE, DURATION_S, MEASURE_FROM_S = 10.0, 20.0, 6.0
TOKENS = 100
WARM = 24  # the first requests name each deployment in turn: both are known for both kinds


def _body(i: int) -> tuple[Mapping[str, Any], str]:
    """Every other request streams. The first `WARM` name A, A, B, B, ... (both kinds seen
    on both: an unknown deployment is predicted from the pessimistic prior, and exploration
    alone may take many seconds to show what it does); the rest ask for `auto`."""
    stream = i % 2 == 0
    body = {**sc.chat_body(salt=i), "max_tokens": TOKENS, "stream": stream}
    if i < WARM:
        return {**body, "model": A.name if i % 4 < 2 else B.name}, "warm"
    return body, "stream" if stream else "whole"


@pytest.fixture(scope="module")
def mixed(start_sim: StartSim, start_gateway: StartRouter) -> tuple[sc.Run, str]:
    sim = start_sim({A.sim_model: sc.profile(100, tokens=TOKENS, tpot_ms=20.0),
                     B.sim_model: sc.profile(400, tokens=TOKENS, tpot_ms=2.0)})
    route = sc.TaskRoute((A.name, B.name), sc.Slo(ttft_p95_ms=1000, availability=0.99))
    config = sc.router_yaml(sim.base_url, [A, B], route,
                            stats=sc.StatsKnobs(half_life_s=5.0, explore_share=0.03))
    gateway = start_gateway("unstreamed", config)
    run = sc.run_async(sc.open_loop(gateway.base_url, RATE, DURATION_S, _body))
    text = "\n".join(f"{label}:\n{sc.timeline(run, [A.name, B.name], label)}"
                     for label in ("stream", "whole"))
    print(f"\nmixed streamed and non-streamed, open loop {RATE:g} req/s\n{text}")
    return run, text


def test_streams_go_to_the_fast_first_token_and_whole_answers_to_the_fast_answer(
        mixed: tuple[sc.Run, str]) -> None:
    """From 6 s on, >= 80% of streamed requests go to A (first token 100 ms against 400 ms)
    and >= 80% of non-streamed ones to B (whole answer 0.6 s against 2.1 s); every request
    is answered."""
    run, text = mixed
    streams = sc.window(run.shots, MEASURE_FROM_S, run.duration_s, "stream")
    wholes = sc.window(run.shots, MEASURE_FROM_S, run.duration_s, "whole")
    assert len(streams) >= 40 and len(wholes) >= 40, text
    assert sc.share(streams, A.name) >= 0.8, text
    assert sc.share(wholes, B.name) >= 0.8, text
    assert all(s.ok for s in run.shots), [s for s in run.shots if not s.ok][:3]
