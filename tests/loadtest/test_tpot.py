"""The load generator's TPOT is the router's: DESIGN.md's `(t_last - t_first) / (output_tokens -
1)`, the output tokens from the usage chunk (real processes: the simulator, slorouter, /metrics).

The simulator's model `chunky` streams 16 tokens in chunks of 4, a chunk every 40 ms (10 ms a
token), so the first content chunk and the last are 120 ms apart: DESIGN's TPOT is 120 / 15 =
8 ms. Dividing by the tokens after the first chunk (12) read 10 ms, 25% above the router's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from router.loadtest.loadgen import RunResult, run_plan
from router.loadtest.workload import PlannedRequest
from tests.support.scrape import tpot_histogram
from tests.support.services import Running, simulated_gateway, start_simulator

CHUNKY = {"ttft_p50_ms": 20, "ttft_p99_ms": 20, "tpot_p50_ms": 10, "tpot_p99_ms": 10,
          "output_tokens_p50": 16, "output_tokens_p99": 16, "tokens_per_chunk": 4}
DESIGN_TPOT_S = 3 * 4 * 0.010 / (16 - 1)  # three chunk gaps of 4 tokens, over 15 tokens
COUNT = 8


def _config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: chunky, model: openai/chunky, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: chunky, deployments: [chunky]}}]
routes: {{default_model: chunky}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with simulated_gateway(tmp_path_factory.mktemp("gw"), {"chunky": CHUNKY}, _config,
                           env={}) as router:
        yield router


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("sim"), {"chunky": CHUNKY})
    yield running
    running.stop()


def _plan(include_usage: bool) -> list[PlannedRequest]:
    options = b',"stream_options":{"include_usage":true}' if include_usage else b""
    body = (b'{"model":"chunky","max_tokens":16,"stream":true' + options
            + b',"messages":[{"role":"user","content":"tell me a story"}]}')
    return [PlannedRequest("chunky", True, body)] * COUNT


async def _run(base_url: str, include_usage: bool) -> RunResult:
    result = await run_plan("t", f"{base_url}/v1/chat/completions", _plan(include_usage),
                            rate=20.0, duration_s=5.0, seed=3)
    assert len(result.samples) == COUNT and result.errors() == 0, result.samples
    return result


@pytest.mark.exclusive  # the client's chunk times drift from the router's on a loaded machine
async def test_the_bench_tpot_matches_the_routers_for_the_same_requests(
        gateway: Running) -> None:
    """Through slorouter, each stream's TPOT (from the usage's 16 tokens) matches what the
    router recorded for the same requests, mean for mean within 10%, and DESIGN's figure from
    the simulator's timetable (8 ms a token, not the 10 ms of its pace)."""
    result = await _run(gateway.base_url, include_usage=True)
    count, total = await tpot_histogram(gateway.base_url)
    tpots = [s.tpot_s for s in result.samples if s.tpot_s is not None]
    assert count == COUNT and len(tpots) == COUNT
    bench_mean, router_mean = statistics.fmean(tpots), total / count
    assert abs(bench_mean - router_mean) <= 0.1 * router_mean, (bench_mean, router_mean)
    assert abs(bench_mean - DESIGN_TPOT_S) <= 0.15 * DESIGN_TPOT_S, bench_mean
    assert {(s.output_tokens, s.tpot_tokens) for s in result.samples} == {(16, "usage")}


async def test_a_server_sending_no_usage_has_its_chunks_counted_and_says_so(
        sim: Running) -> None:
    """Straight to the simulator: with `include_usage` TPOT is DESIGN's from the usage (8 ms);
    without it no usage comes, so the 4 content chunks are counted as the output tokens
    (120 ms / 3 = 40 ms, reading high as the chunks carry 4 tokens) and marked `chunks`."""
    with_usage = await _run(sim.base_url, include_usage=True)
    without = await _run(sim.base_url, include_usage=False)
    usage_mean = statistics.fmean(s.tpot_s or 0.0 for s in with_usage.samples)
    chunks_mean = statistics.fmean(s.tpot_s or 0.0 for s in without.samples)
    assert abs(usage_mean - DESIGN_TPOT_S) <= 0.15 * DESIGN_TPOT_S, usage_mean
    assert abs(chunks_mean - 0.120 / 3) <= 0.15 * 0.040, chunks_mean
    assert {s.tpot_tokens for s in with_usage.samples} == {"usage"}
    assert {(s.tpot_tokens, s.output_tokens) for s in without.samples} == {("chunks", None)}

