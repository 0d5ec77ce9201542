"""Workload mixes and arrival schedules: seeded, bounded, and shaped as the mix says."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from cache.policy import CacheRule, decide
from router.classify.classifier import load_default_classifier
from router.classify.types import Hints, RequestView
from router.embedded import simulator_config
from router.loadtest.loadgen import covering_duration, plan_run, poisson_schedule
from router.loadtest.workload import load_workload, plan_requests

DEFAULT_MIX = Path(__file__).resolve().parents[2] / "bench" / "workloads" / "default.json"


def test_same_seed_gives_the_same_schedule_and_bodies() -> None:
    """Every target sees identical arrivals and requests for a given seed."""
    workload = load_workload(DEFAULT_MIX)
    assert np.array_equal(poisson_schedule(20, 30, 5), poisson_schedule(20, 30, 5))
    assert plan_requests(workload, 200, 5) == plan_requests(workload, 200, 5)
    assert plan_requests(workload, 200, 5) != plan_requests(workload, 200, 6)


def test_schedule_is_bounded_by_duration_and_count_with_the_target_mean_rate() -> None:
    """Arrivals stay inside the duration, respect max_requests, and average the rate."""
    rate, duration = 50.0, 200.0
    times = poisson_schedule(rate, duration, seed=1)
    gaps = np.diff(times)
    assert times.max() < duration and np.all(gaps > 0)
    assert abs(len(times) / duration - rate) < rate * 0.05
    assert len(poisson_schedule(rate, duration, seed=1, max_requests=17)) == 17


def test_class_shares_follow_the_mix_weights() -> None:
    """Over many draws each class's share is close to its normalised weight."""
    workload = load_workload(DEFAULT_MIX)
    total = sum(c.weight for c in workload.mix.classes)
    counts = Counter(r.cls for r in plan_requests(workload, 20_000, 3))
    for cls in workload.mix.classes:
        assert abs(counts[cls.name] / 20_000 - cls.weight / total) < 0.015


def test_default_mix_covers_languages_lengths_streaming_and_repeats() -> None:
    """The default mix has en/fa/mixed text, all lengths, streams, and cache-hit repeats."""
    workload = load_workload(DEFAULT_MIX)
    planned = plan_requests(workload, 3000, 11)
    bodies = [orjson.loads(r.body) for r in planned]
    texts = {b["messages"][0]["content"] for b in bodies}
    langs = {p.lang for p in workload.pool if p.text in texts}
    lengths = {p.length for p in workload.pool if p.text in texts}
    repeats = [b["messages"][0]["content"] for r, b in zip(planned, bodies, strict=True)
               if r.cls.startswith("repeat")]
    assert langs == {"en", "fa", "mixed"} and lengths == {"short", "median", "long"}
    assert {r.stream for r in planned} == {True, False}
    assert all(b.get("stream_options") == {"include_usage": True}
               for r, b in zip(planned, bodies, strict=True) if r.stream)
    assert len(set(repeats)) <= 12 < len(repeats)
    assert all(b["temperature"] == 0.0 for r, b in zip(planned, bodies, strict=True)
               if r.cls.startswith("repeat"))


def test_every_repeat_class_of_the_default_mix_can_hit_the_simulator_defaults_cache() -> None:
    """A repeat class exists to give the result cache hits: under the embedded simulator default
    (what `python -m bench.suite` routes through), each of its prompts, as the shipped classifier
    reads it, lands on a task whose policy caches it. The English pool once held CLINC150
    intents ("set a timer ...") read as `action`, which is never cached: it never hit."""
    workload = load_workload(DEFAULT_MIX)
    policies = simulator_config({}, unset_stand_in=True).policies
    assert policies is not None
    classifier = load_default_classifier()
    bodies = {r.body: r.cls for r in plan_requests(workload, 3000, 11)
              if r.cls.startswith("repeat")}
    assert set(bodies.values()) == {c.name for c in workload.mix.classes if c.repeat_pool}
    for body, cls in bodies.items():
        fields = {k: v for k, v in orjson.loads(body).items() if k != "model"}
        labels = classifier.classify(
            RequestView(messages=(("user", fields["messages"][0]["content"]),)), Hints())
        policy = policies.for_task(labels.task)
        risk_rule = policy.risk.get(labels.risk)
        rule = CacheRule(enabled=policy.cache.enabled and (risk_rule is None or risk_rule.cache),
                         ttl_s=policy.cache.ttl_s,
                         require_deterministic=policy.cache.require_deterministic)
        decision = decide(fields, rule, task=labels.task, risk=labels.risk,
                          signals=labels.signals)
        assert decision.uses_cache, (cls, labels.task, labels.risk, decision.bypass_reason)


def test_a_class_without_matching_prompts_is_rejected(tmp_path: Path) -> None:
    """A mix whose class finds no prompt fails at load, naming the class."""
    (tmp_path / "pool.jsonl").write_text('{"text": "hi", "lang": "en", "length": "short"}\n')
    (tmp_path / "mix.json").write_text(orjson.dumps({
        "name": "x", "prompts": "pool.jsonl",
        "classes": [{"name": "needs-fa", "weight": 1, "lang": ["fa"]}]}).decode())
    with pytest.raises(ValueError, match="needs-fa"):
        load_workload(tmp_path / "mix.json")


@pytest.mark.parametrize(("mix", "pool", "says"), [
    (b'{"name": "x", "prompts": "pool.jsonl", "classes": [], "extra": 1}', b"", "mix.json: "),
    (b"\xff", b"", "mix.json: Invalid JSON"),
    (None, b'{"text": "hi", "lang": "en", "length": "short"}\n{"text": 5}\n', "pool.jsonl:2: "),
    (None, b'{"text": "caf\xe9", "lang": "en", "length": "short"}\n', "pool.jsonl:1: "),
])
def test_a_file_that_does_not_validate_is_one_line_naming_it(
        tmp_path: Path, mix: bytes | None, pool: bytes, says: str) -> None:
    (tmp_path / "pool.jsonl").write_bytes(pool)
    (tmp_path / "mix.json").write_bytes(mix if mix is not None else orjson.dumps({
        "name": "x", "prompts": "pool.jsonl",
        "classes": [{"name": "any", "weight": 1}]}))
    with pytest.raises(ValueError) as caught:
        load_workload(tmp_path / "mix.json")
    assert says in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize("weight", [b"Infinity", b"1e309"])
def test_an_infinite_class_weight_is_refused_at_load(tmp_path: Path, weight: bytes) -> None:
    """A weight of infinity (JSON's `Infinity`, or a number too large for a float) gives no
    share: refused with the file and field named, not a traceback when the plan is drawn."""
    (tmp_path / "pool.jsonl").write_text('{"text": "hi", "lang": "en", "length": "short"}\n')
    (tmp_path / "mix.json").write_bytes(b'{"name": "x", "prompts": "pool.jsonl", "classes": '
                                        b'[{"name": "a", "weight": ' + weight + b'}]}')
    with pytest.raises(ValueError, match=r"mix\.json: .*weight"):
        load_workload(tmp_path / "mix.json")


@pytest.mark.parametrize("field", [b'"weight": "1"', b'"weight": true',
                                   b'"weight": 1, "stream": "yes"',
                                   b'"weight": 1, "max_tokens": "64"'])
def test_a_value_of_the_wrong_type_is_refused_not_coerced(tmp_path: Path, field: bytes) -> None:
    """A quoted number or a word for a boolean is a typo in a mix, refused with the field
    named (it was read as 1.0, True or 64)."""
    (tmp_path / "pool.jsonl").write_text('{"text": "hi", "lang": "en", "length": "short"}\n')
    (tmp_path / "mix.json").write_bytes(b'{"name": "x", "prompts": "pool.jsonl", "classes": '
                                        b'[{"name": "a", ' + field + b'}]}')
    with pytest.raises(ValueError, match=r"mix\.json: classes\.0\.(weight|stream|max_tokens)"):
        load_workload(tmp_path / "mix.json")


def test_weights_whose_sum_overflows_are_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "pool.jsonl").write_text('{"text": "hi", "lang": "en", "length": "short"}\n')
    (tmp_path / "mix.json").write_bytes(b'{"name": "x", "prompts": "pool.jsonl", "classes": '
                                        b'[{"name": "a", "weight": 1e308}, '
                                        b'{"name": "b", "weight": 1e308}]}')
    with pytest.raises(ValueError, match="finite"):
        load_workload(tmp_path / "mix.json")


def test_a_byte_order_mark_on_either_file_is_read_past(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (tmp_path / "pool.jsonl").write_bytes(bom + b'{"text": "hi", "lang": "en", '
                                          b'"length": "short"}\n')
    (tmp_path / "mix.json").write_bytes(bom + b'{"name": "x", "prompts": "pool.jsonl", '
                                        b'"classes": [{"name": "a", "weight": 1}]}')
    assert [p.text for p in load_workload(tmp_path / "mix.json").pool] == ["hi"]


def test_requests_of_one_prompt_and_class_share_one_body() -> None:
    """A large plan holds each distinct body once (a 6-million-request plan of copies took
    4.9 GB before its first send)."""
    workload = load_workload(DEFAULT_MIX)
    plan = plan_requests(workload, 20_000, seed=3)
    bodies = {id(request.body) for request in plan}
    assert len(bodies) <= len(workload.pool) * len(workload.mix.classes) < len(plan)
    assert plan == plan_requests(workload, 20_000, seed=3)


def test_a_run_too_large_to_plan_or_holding_no_arrival_is_refused() -> None:
    workload = load_workload(DEFAULT_MIX)
    with pytest.raises(ValueError, match="--max-requests"):
        plan_run(workload, rate=1e9, duration_s=60, seed=7)
    with pytest.raises(ValueError, match="no arrival"):
        plan_run(workload, rate=1, duration_s=0.01, seed=7)
    assert len(plan_run(workload, rate=1e9, duration_s=60, seed=7, max_requests=50)) == 50


@pytest.mark.parametrize("wanted", [1, 7, 200, 499, 500, 1000])
def test_a_covering_duration_holds_at_least_the_requests_asked(wanted: int) -> None:
    """`bench.vs_litellm --min-requests N` at any rate: the duration `N / rate` held fewer
    than N arrivals about half the time (498 of 500)."""
    for rate in (5.0, 50.0, 800.0):
        duration = covering_duration(rate, 2.0, 42, wanted)
        assert len(poisson_schedule(rate, duration, 42)) >= wanted
        assert duration >= 2.0


def test_a_longer_schedule_of_a_seed_extends_the_shorter_one() -> None:
    short, long = poisson_schedule(10, 10, 7), poisson_schedule(10, 100, 7)
    assert len(short) > 50 and list(long[:len(short)]) == list(short)
