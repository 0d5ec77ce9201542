"""Evaluated policies: floors from eval reports, eligibility checks, decisions, policy check."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import pytest

from policies.check import check_policies
from policies.eligibility import CheckName, RequestFacts, Verdict
from policies.eval_report import EvalReport, QualityTable, load_reports, quality_table
from policies.loader import PolicyValidationError, load_config_text
from policies.schema import TaskPolicy
from router.classify.types import Labels
from router.decide import EXPLORED, Decision, Ranked, StaticRanker, decide, require_route
from router.errors import NoEligibleModelError, RequestError
from router.providers.base import default_max_temperature
from router.runtime_config import RuntimeConfig, resolve

CONFIG = """
version: 1
deployments:
  - {name: cheap-1, model: openai/cheap, input_price_per_mtok: 0.1, output_price_per_mtok: 0.4,
     context_window: 8000}
  - {name: mid-1, model: openai/mid, input_price_per_mtok: 1, output_price_per_mtok: 2,
     supports_tools: false}
  - {name: big-1, model: openai/big, input_price_per_mtok: 5, output_price_per_mtok: 15,
     zero_data_retention: true}
models:
  - {name: cheap, deployments: [cheap-1]}
  - {name: mid, deployments: [mid-1]}
  - {name: big, deployments: [big-1]}
policies:
  default:
    candidates: [cheap, mid, big]
    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}
  tasks:
    math:
      candidates: [cheap, mid, big]
      quality_floor: {metric: accuracy, min: 0.80}
      risk:
        high: {require_zero_data_retention: true}
    chat:
      candidates: [cheap, mid]
      quality_floor: {min: 0.99}
    code:
      candidates: [cheap, mid]
      quality_floor: {min: 0.99}
      no_candidate_fallback: big
"""


def _report(rows: list[tuple[str, str, float, float]]) -> EvalReport:
    return EvalReport.model_validate({"suite": "unit", "suite_version": "1",
                                      "created": "2026-11-30", "results": [
        {"model": m, "task": t, "mean": mean, "lower": lower,
         "upper": min(1.0, 2 * mean - lower), "n": 500} for m, t, mean, lower in rows]})


QUALITY = quality_table([_report([
    ("cheap", "math", 0.84, 0.81), ("mid", "math", 0.86, 0.83), ("big", "math", 0.95, 0.93),
    ("cheap", "summarization", 0.91, 0.89), ("big", "summarization", 0.92, 0.90),
    ("mid", "summarization", 0.85, 0.83),
])], "q1")


def _runtime(text: str = CONFIG, quality: QualityTable = QUALITY) -> RuntimeConfig:
    return resolve(load_config_text(text), {}, lambda _m: None, quality=quality)


def _decide(task: str, risk: str = "low", prompt: int = 100, out: int = 100,
            tools: bool = False, runtime: RuntimeConfig | None = None) -> object:
    labels = Labels(task=task, risk=risk)  # type: ignore[arg-type]
    facts = RequestFacts(task=labels.task, risk=labels.risk, prompt_tokens=prompt,
                         max_output_tokens=out, needs_tools=tools)
    return decide("auto", labels, facts, runtime if runtime else _runtime(), StaticRanker(),
                  lambda _name: True)


def test_cheapest_model_whose_lower_bound_clears_the_floor_wins() -> None:
    """math floor 0.80: cheap's lower bound 0.81 clears it, so the cheapest goes first."""
    decision = _decide("math")
    assert decision.deployments == ("cheap-1", "mid-1", "big-1")  # type: ignore[attr-defined]


class _Probing:
    """A ranker that puts the last candidate first as an exploration probe."""

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        *rest, probe = [v.deployment for v in eligible]
        return (Ranked(probe, 0.0, f"{EXPLORED}; ttft_p95_over_target", explored=True),
                *(Ranked(name, 1.0, "ranked") for name in rest))


def test_a_decision_says_when_its_first_deployment_is_an_exploration_probe() -> None:
    """The ranker's `explored` reason on the first place becomes `Decision.explored`."""
    labels = Labels(task="math", risk="low")
    facts = RequestFacts(task="math", risk="low", prompt_tokens=100, max_output_tokens=100)
    probed = decide("auto", labels, facts, _runtime(), _Probing(), lambda _name: True)
    assert probed.explored and probed.deployments == ("big-1", "cheap-1", "mid-1")
    assert not _decide("math").explored  # type: ignore[attr-defined]


def test_every_verdict_judges_each_named_check_once() -> None:
    """A verdict holds one check per `CheckName`, in one order, and a name reads as its plain
    string (as the explain endpoint's JSON shows it)."""
    verdicts = _decide("math").verdicts  # type: ignore[attr-defined]
    assert verdicts and all([c.name for c in v.checks] == list(CheckName) for v in verdicts)
    assert orjson.loads(orjson.dumps([c.name for c in verdicts[0].checks])) == [
        "floor", "risk", "fits", "healthy", "budget"]


def test_relative_floor_weighs_both_models_uncertainty() -> None:
    """0.95 x big (0.92) = 0.874: cheap (0.91, each bound 0.02 away) is over it by more than
    both results' uncertainty (+0.008 at 95%) and qualifies, mid (0.85) does not; big meets its
    own floor (it failed it when its mean was the bar for its lower bound)."""
    decision = _decide("summarization")
    assert decision.deployments == ("cheap-1", "big-1")  # type: ignore[attr-defined]
    verdicts = {v.model: v for v in decision.verdicts}  # type: ignore[attr-defined]
    assert not verdicts["mid"].eligible and "0.850" in verdicts["mid"].checks[0].detail
    assert "+0.008 >= 0" in verdicts["cheap"].checks[0].detail
    assert verdicts["big"].checks[0].detail.startswith("the reference of its own floor")


def test_a_model_at_a_relative_floor_passes_at_most_the_bounds_rate() -> None:
    """A model whose true quality is exactly the floor (0.95 x a reference at 0.9), both
    measured on 50 items, passed about 5% of the time when its lower bound was held to the
    reference's mean (a point estimate); with both results' uncertainty it passes at most the
    one-sided 2.5% the bounds promise. Exact over both binomials."""
    from math import comb

    from policies.eligibility import floor_check
    from policies.intervals import wilson_interval
    from policies.schema import QualityFloor

    n, reference_q = 50, 0.9
    model_q = 0.95 * reference_q
    floor = QualityFloor(relative_to="ref", ratio=0.95)

    def pmf(k: int, q: float) -> float:
        return comb(n, k) * q ** k * (1 - q) ** (n - k)

    def row(model: str, k: int) -> tuple[str, str, float, float, float]:
        lower, upper = wilson_interval(k, n)
        return model, "chat", k / n, lower, upper

    passed = 0.0
    for reference_k in range(n + 1):
        for model_k in range(n + 1):
            table = quality_table([EvalReport.model_validate({
                "suite": "unit", "suite_version": "1", "created": "2026-11-30", "results": [
                    {"model": m, "task": t, "mean": mean, "lower": lo, "upper": hi, "n": n}
                    for m, t, mean, lo, hi in (row("ref", reference_k),
                                               row("cand", model_k))]})], "q")
            if floor_check(floor, "cand", "chat", table).passed:
                passed += pmf(reference_k, reference_q) * pmf(model_k, model_q)
    assert passed <= 0.025, passed


def test_a_floor_without_an_eval_makes_the_model_ineligible() -> None:
    """No eval of a model for a task means the floor is not backed: not eligible."""
    decision = _decide("translation")  # default policy, no reports for translation at all
    assert decision.deployments == ()  # type: ignore[attr-defined]
    with pytest.raises(NoEligibleModelError):
        require_route(decision)  # type: ignore[arg-type]


def test_fit_checks_context_window_and_tools() -> None:
    """A prompt over cheap's window and a tools request both exclude the unfit deployments."""
    long = _decide("math", prompt=7950, out=100)
    assert "cheap-1" not in long.deployments  # type: ignore[attr-defined]
    tools = _decide("math", tools=True)
    assert "mid-1" not in tools.deployments  # type: ignore[attr-defined]


def test_fit_checks_that_a_deployment_answers_the_choices_asked_for() -> None:
    """`n` > 1 excludes a deployment with `supports_n: false` (one whose provider takes no `n`
    answers one choice); no deployment left is a 400 naming `n`; one choice goes anywhere."""
    runtime = _runtime(CONFIG.replace("supports_tools: false}",
                                      "supports_tools: false, supports_n: false}"))
    labels = Labels(task="math", risk="low")
    many = RequestFacts(task="math", risk="low", prompt_tokens=100, max_output_tokens=100,
                        completions=3)
    decision = decide("auto", labels, many, runtime, StaticRanker(), lambda _name: True)
    assert decision.deployments == ("cheap-1", "big-1")
    mid = next(v for v in decision.verdicts if v.deployment == "mid-1")
    assert [c.detail for c in mid.checks if not c.passed] == [
        "request asks for 3 choices (n); deployment answers one"]
    assert _decide("math", runtime=runtime).deployments == (  # type: ignore[attr-defined]
        "cheap-1", "mid-1", "big-1")
    with pytest.raises(RequestError) as caught:
        decide("mid", labels, many, runtime, StaticRanker(), lambda _name: True)
    assert (caught.value.param, caught.value.code) == ("n", "no_model_fits")


def test_fit_checks_that_a_deployment_returns_the_logprobs_asked_for() -> None:
    """`logprobs` excludes a deployment with `supports_logprobs: false`; none left is a 400
    naming `logprobs`."""
    runtime = _runtime(CONFIG.replace("supports_tools: false}",
                                      "supports_tools: false, supports_logprobs: false}"))
    labels = Labels(task="math", risk="low")
    asking = RequestFacts(task="math", risk="low", prompt_tokens=100, max_output_tokens=100,
                          needs_logprobs=True)
    decision = decide("auto", labels, asking, runtime, StaticRanker(), lambda _name: True)
    assert decision.deployments == ("cheap-1", "big-1")
    mid = next(v for v in decision.verdicts if v.deployment == "mid-1")
    assert [c.detail for c in mid.checks if not c.passed] == [
        "request asks for logprobs; deployment returns none"]
    with pytest.raises(RequestError) as caught:
        decide("mid", labels, asking, runtime, StaticRanker(), lambda _name: True)
    assert (caught.value.param, caught.value.code) == ("logprobs", "no_model_fits")


def test_fit_checks_the_temperature_a_deployment_takes() -> None:
    """A temperature above a deployment's `max_temperature` rules it out (the default: 1 for
    Anthropic's models, 2 for the rest); above every candidate's, a 400 naming `temperature`."""
    runtime = _runtime(CONFIG.replace("model: openai/cheap,", "model: anthropic/cheap,"))
    labels = Labels(task="math", risk="low")

    def facts(temperature: float | None) -> RequestFacts:
        return RequestFacts(task="math", risk="low", prompt_tokens=100, max_output_tokens=100,
                            temperature=temperature)

    def served(temperature: float | None, config: RuntimeConfig = runtime) -> tuple[str, ...]:
        return decide("auto", labels, facts(temperature), config, StaticRanker(),
                      lambda _name: True).deployments

    assert served(None) == served(1.0) == ("cheap-1", "mid-1", "big-1")
    assert served(1.5) == ("mid-1", "big-1")
    hot = decide("auto", labels, facts(1.5), runtime, StaticRanker(), lambda _name: True)
    cheap = next(v for v in hot.verdicts if v.deployment == "cheap-1")
    assert [c.detail for c in cheap.checks if not c.passed] == [
        "request's temperature 1.5 > deployment's most 1"]
    capped = _runtime(CONFIG.replace("model: openai/cheap,", "model: anthropic/cheap,")
                      .replace("supports_tools: false}", "supports_tools: false, "
                               "max_temperature: 1.2}")
                      .replace("output_price_per_mtok: 15,",
                               "output_price_per_mtok: 15, max_temperature: 1,"))
    assert served(1.1, capped) == ("mid-1",)
    assert served(1.5, capped) == ()
    with pytest.raises(RequestError) as caught:
        require_route(decide("auto", labels, facts(1.5), capped, StaticRanker(),
                             lambda _name: True))
    assert (caught.value.param, caught.value.code) == ("temperature", "no_model_fits")


@pytest.mark.parametrize(("model", "most"), [
    ("anthropic/claude-sonnet-4-5", 1.0), ("bedrock/anthropic.claude-3-5-sonnet", 1.0),
    ("vertex_ai/claude-3-5-sonnet@20240620", 1.0), ("openai/gpt-4o", 2.0), ("gpt-4o", 2.0),
    ("openrouter/anthropic/claude-3.5-sonnet", 2.0), ("bedrock/meta.llama3-70b", 2.0)])
def test_the_default_max_temperature_is_anthropics_for_claude_on_its_hosts(
        model: str, most: float) -> None:
    assert default_max_temperature(model) == most


def test_high_risk_rule_restricts_to_zero_data_retention() -> None:
    """Risk high under the math policy keeps only zero-data-retention deployments."""
    assert _decide("math", risk="high").deployments == ("big-1",)  # type: ignore[attr-defined]


def test_cost_ceiling_excludes_expensive_candidates() -> None:
    """A per-request cost ceiling removes candidates whose worst case exceeds it."""
    text = CONFIG.replace("      quality_floor: {metric: accuracy, min: 0.80}",
                          "      quality_floor: {metric: accuracy, min: 0.80}\n"
                          "      max_cost_per_request_usd: 0.0005")
    decision = _decide("math", runtime=_runtime(text))
    assert decision.deployments == ("cheap-1", "mid-1")  # type: ignore[attr-defined]


FALLBACK_CONFIG = CONFIG.replace("""    code:
      candidates: [cheap, mid]
      quality_floor: {min: 0.99}
      no_candidate_fallback: big""", """    code:
      candidates: [cheap, mid]
      no_candidate_fallback: big
      risk:
        high: {require_zero_data_retention: true}""")


def _decide_code(text: str, risk: str, healthy: Callable[[str], bool]) -> Decision:
    labels = Labels(task="code", risk=risk)  # type: ignore[arg-type]
    facts = RequestFacts(task="code", risk=labels.risk, prompt_tokens=100, max_output_tokens=100)
    return decide("auto", labels, facts, _runtime(text), StaticRanker(), healthy)


def test_no_candidate_fallback_serves_when_none_qualifies() -> None:
    """code: both candidates' circuits are open, so the named fallback model serves (its own
    health is the runner's to judge)."""
    decision = _decide_code(FALLBACK_CONFIG, "low", lambda name: False)
    assert decision.deployments == ("big-1",) and decision.model == "big"


def test_no_candidate_fallback_never_breaks_the_risk_rule_or_the_floor() -> None:
    """A fallback is held to the floor, the risk rule, fit and the ceiling like a candidate:
    a non-ZDR fallback for a high-risk request, or one below the floor, is no route (503)."""
    not_zdr = FALLBACK_CONFIG.replace("no_candidate_fallback: big", "no_candidate_fallback: mid")
    high = _decide_code(not_zdr, "high", lambda name: True)
    assert high.deployments == ()
    assert any(v.role == "no_candidate_fallback" and not v.eligible for v in high.verdicts)
    below_floor = _decide_code(CONFIG, "low", lambda name: True)  # 0.99, and big has no eval
    assert below_floor.deployments == ()
    assert _decide_code(FALLBACK_CONFIG, "high", lambda name: False).deployments == ("big-1",)


def test_a_deployment_shared_by_two_candidate_models_is_tried_once() -> None:
    """Two models over one deployment, or a fallback that is also a candidate: one place in
    the order."""
    shared = CONFIG.replace("  - {name: big, deployments: [big-1]}",
                            "  - {name: big, deployments: [big-1]}\n"
                            "  - {name: big-latest, deployments: [big-1]}").replace(
        "      candidates: [cheap, mid, big]\n      quality_floor: {metric: accuracy, min: 0.80}",
        "      candidates: [big, big-latest]\n      fallbacks: [big-latest, big]")
    decision = _decide("math", runtime=_runtime(shared))
    assert decision.deployments == ("big-1",)  # type: ignore[attr-defined]


def test_policy_check_passes_a_sound_policy_and_catches_a_below_floor_route() -> None:
    """Adding a model under its floor to a task's candidates is a violation."""
    sound = CONFIG.split("  tasks:")[0] + """  tasks:
    math:
      candidates: [cheap, mid, big]
      quality_floor: {metric: accuracy, min: 0.80}
"""
    sound = sound.replace("    candidates: [cheap, mid, big]\n    quality_floor: {metric: "
                          "accuracy, relative_to: big, ratio: 0.95}",
                          "    candidates: [big]\n")
    assert [str(v) for v in check_policies(load_config_text(sound), QUALITY)
            if v.task == "math"] == []
    regressed = sound.replace("min: 0.80}", "min: 0.82}")
    violations = check_policies(load_config_text(regressed), QUALITY)
    assert [(v.task, v.model) for v in violations if v.task == "math"] == [("math", "cheap")]


def test_policy_check_flags_floors_without_evals() -> None:
    """A floor on a task no report covers is a violation for every model it could route to."""
    violations = check_policies(load_config_text(CONFIG), QUALITY)
    assert any(v.task.startswith("translation") and "no eval" in v.reason for v in violations)


def test_policy_references_are_checked_at_load() -> None:
    """Unknown candidate, fallback or reference models are all listed."""
    bad = CONFIG.replace("relative_to: big", "relative_to: huge").replace(
        "no_candidate_fallback: big", "no_candidate_fallback: nope")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(bad)
    assert len(caught.value.problems) == 2


def test_eval_reports_load_and_version_changes_with_content(tmp_path: Path) -> None:
    """Report files are validated, merged, and hashed into the version."""
    first = tmp_path / "a.json"
    first.write_text(_report([("cheap", "math", 0.8, 0.7)]).model_dump_json())
    table = load_reports([first])
    assert table.get("cheap", "math", "accuracy") is not None
    first.write_text(_report([("cheap", "math", 0.8, 0.71)]).model_dump_json())
    assert load_reports([first]).version != table.version
    first.write_text(json.dumps({"suite": "x"}))
    with pytest.raises(ValueError):
        load_reports([first])


def test_hedge_delay_sits_below_a_ten_percent_slow_tail() -> None:
    """With 10% of answers ten times slower, the p88 trigger comes from the fast body (read
    from the sketch), so hedges start before the tail; without enough data, no hedge."""
    from router.feedback import HedgeDelays
    from router.stats import LocalStatsStore, Observation

    clock = [1_700_000_000.0]
    store = LocalStatsStore(clock=lambda: clock[0])
    delays = HedgeDelays(store, percentile=0.88)
    assert delays("a", "chat", 10) is None
    for i in range(200):
        ttft = 1.0 if i % 10 == 0 else 0.1
        store.record(Observation.from_timings(
            deployment="a", task="chat", prompt_tokens=10, output_tokens=5,
            t_start=clock[0], t_first_token=clock[0] + ttft, t_last_token=clock[0] + ttft,
            t_end=clock[0] + ttft))
    delay = delays("a", "chat", 10)
    assert delay is not None and 0.09 < delay < 0.2


def test_no_route_says_why_and_whose_fault_it_is() -> None:
    """Nothing to try: the message names each deployment's failed checks; a request that fits
    no candidate (too long, or over the ceiling everywhere) is a 400 no retry can fix; open
    circuits make a 503 with a Retry-After."""
    from router.errors import RequestError

    windows = CONFIG.replace("supports_tools: false}", "supports_tools: false, "
                             "context_window: 8000}").replace(
        "     zero_data_retention: true}", "     zero_data_retention: true, context_window: 8000}")
    too_long = _decide("math", prompt=200_000, out=100, runtime=_runtime(windows))
    with pytest.raises(RequestError) as long_error:
        require_route(too_long)  # type: ignore[arg-type]
    assert long_error.value.status_code == 400 and long_error.value.code == "no_model_fits"
    assert "cheap-1" in long_error.value.message
    capped = CONFIG.replace("      quality_floor: {metric: accuracy, min: 0.80}",
                            "      quality_floor: {metric: accuracy, min: 0.80}\n"
                            "      max_cost_per_request_usd: 0.0000001")
    with pytest.raises(RequestError) as over:
        require_route(_decide("math", runtime=_runtime(capped)))  # type: ignore[arg-type]
    assert (over.value.code, over.value.param) == ("over_cost_ceiling", "max_tokens")
    down = _decide_code(FALLBACK_CONFIG.replace("no_candidate_fallback: big",
                                                "no_candidate_fallback: null"),
                        "low", lambda name: False)
    with pytest.raises(NoEligibleModelError) as unhealthy:
        require_route(down)
    assert unhealthy.value.retry_after == 1.0 and "circuit open" in unhealthy.value.message


def test_the_cost_ceiling_counts_every_completion_asked_for() -> None:
    """`n` completions may each use the output limit: 16 of them cost 16 times the output."""
    capped = CONFIG.replace("      quality_floor: {metric: accuracy, min: 0.80}",
                            "      quality_floor: {metric: accuracy, min: 0.80}\n"
                            "      max_cost_per_request_usd: 0.001")
    labels = Labels(task="math", risk="low")
    one, sixteen = (decide("auto", labels, RequestFacts(
        task="math", risk="low", prompt_tokens=100, max_output_tokens=500, completions=n),
        _runtime(capped), StaticRanker(), lambda _name: True) for n in (1, 16))
    assert "cheap-1" in one.deployments and sixteen.deployments == ()


ENFORCED = CONFIG.replace("  - {name: big, deployments: [big-1]}",
                          "  - {name: big, deployments: [big-1]}\n"
                          "  - {name: mixed, deployments: [mid-1, big-1]}").replace(
    "policies:\n", "policies:\n  enforce_risk_rule_on_pinned_requests: true\n")


def _pinned(model: str, risk: str, text: str, prompt: int = 100) -> Decision:
    labels = Labels(task="math", risk=risk)  # type: ignore[arg-type]
    facts = RequestFacts(task="math", risk=labels.risk, prompt_tokens=prompt,
                         max_output_tokens=100)
    return decide(model, labels, facts, _runtime(text), StaticRanker(), lambda _name: True)


def test_a_pinned_request_skips_the_risk_rule_by_default() -> None:
    """Without the setting, a high-risk request naming a model without zero data retention
    goes there, unjudged."""
    decision = _pinned("mid", "high", CONFIG)
    assert decision.pinned and decision.deployments == ("mid-1",) and decision.verdicts == ()
    assert not decision.risk_rule_applied


def test_an_enforced_risk_rule_refuses_a_pinned_model_it_does_not_allow() -> None:
    """With `enforce_risk_rule_on_pinned_requests`, high risk under math (zero data retention
    required) refuses `mid`: nothing to try, and a 400 naming the model, the deployment and the
    rule, with `model` as the parameter to change."""
    from router.errors import RequestError

    refused = _pinned("mid", "high", ENFORCED)
    assert refused.pinned and refused.deployments == () and refused.risk_rule_applied
    assert [(v.deployment, v.role, [c.name for c in v.checks], v.eligible)
            for v in refused.verdicts] == [("mid-1", "pinned", [CheckName.RISK], False)]
    with pytest.raises(RequestError) as caught:
        require_route(refused)
    error = caught.value
    assert (error.status_code, error.param, error.code) == (400, "model",
                                                            "model_not_allowed_for_risk")
    assert "'mid'" in error.message and "mid-1: risk high requires zero data retention" in (
        error.message)


def test_an_enforced_risk_rule_keeps_the_deployments_it_allows_and_nothing_else() -> None:
    """The risk rule is the only check: a model's zero-data-retention replica serves a
    high-risk request (the other is dropped), low risk keeps every replica, and a prompt too
    long for the model's window is still the caller's to send. A rule that allows models by
    name allows the named model only, whatever deployments it shares."""
    assert _pinned("mixed", "high", ENFORCED).deployments == ("big-1",)
    assert _pinned("mixed", "low", ENFORCED).deployments == ("mid-1", "big-1")
    assert _pinned("cheap", "low", ENFORCED, prompt=9000).deployments == ("cheap-1",)
    allowed_only_big = ENFORCED.replace("high: {require_zero_data_retention: true}",
                                        "high: {candidates: [big]}")
    assert _pinned("big", "high", allowed_only_big).deployments == ("big-1",)
    assert _pinned("mixed", "high", allowed_only_big).deployments == ()  # names models


def test_a_model_under_the_floor_does_not_make_an_over_ceiling_request_a_503() -> None:
    """summarization: cheap is under the floor (it never serves the task), mid under it and over
    the ceiling, big over the ceiling: only a smaller `max_tokens` can help, so the answer is 400
    `over_cost_ceiling`, not a 503 the SDKs retry (cheap's floor-only failure made it one)."""
    from router.errors import RequestError

    quality = quality_table([_report([
        ("cheap", "summarization", 0.80, 0.78), ("big", "summarization", 0.92, 0.90),
        ("mid", "summarization", 0.85, 0.83)])], "q-under")
    capped = CONFIG.replace("relative_to: big, ratio: 0.95}",
                            "relative_to: big, ratio: 0.95}\n    max_cost_per_request_usd: 0.01")
    decision = _decide("summarization", out=10_000, runtime=_runtime(capped, quality))
    with pytest.raises(RequestError) as over:
        require_route(decision)  # type: ignore[arg-type]
    assert (over.value.code, over.value.param) == ("over_cost_ceiling", "max_tokens")
    served = _decide("summarization", out=100, runtime=_runtime(capped, quality))
    assert served.deployments == ("big-1",)  # type: ignore[attr-defined]


def test_an_arm_model_the_policy_bars_is_ineligible_one_that_is_down_is_not() -> None:
    """math, high risk: the risk rule wants zero data retention, which only big has, so an arm
    restricted to cheap is passed over as the policy bars it (no failure of the arm); at low
    risk with cheap's circuit open it is passed over as it is down (a failure of the arm)."""
    def decided(risk: str, restrict_to: str, health: Callable[[str], bool]) -> Decision:
        labels = Labels(task="math", risk=risk)  # type: ignore[arg-type]
        facts = RequestFacts(task="math", risk=labels.risk, prompt_tokens=100,
                             max_output_tokens=100)
        return decide("auto", labels, facts, _runtime(), StaticRanker(), health,
                      restrict_to=restrict_to)

    barred = decided("high", "cheap", lambda _name: True)
    down = decided("low", "cheap", lambda name: name != "cheap-1")
    served = decided("low", "cheap", lambda _name: True)
    assert (barred.restricted, barred.arm_ineligible, barred.deployments) == (
        False, True, ("big-1",))
    assert (down.restricted, down.arm_ineligible) == (False, False)
    assert (served.restricted, served.arm_ineligible, served.deployments) == (
        True, False, ("cheap-1",))


class RecordingRanker(StaticRanker):
    """`StaticRanker` that keeps every policy it was asked to rank under."""

    def __init__(self) -> None:
        self.policies: list[TaskPolicy] = []

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        self.policies.append(policy)
        return super().rank(policy, facts, eligible)


def test_an_arm_is_ranked_under_one_policy_made_at_load_not_a_new_one_per_request() -> None:
    """An experiment arm routed to `model:cheap` narrows math's policy to cheap: that policy is
    made once with the configuration, so the ranker's caches keyed by policy keep hitting (a
    copy per request missed them every time, and evicted the other policies' entries)."""
    runtime = _runtime(CONFIG + """experiments:
  - name: cheaper-math
    tasks: [math]
    unit: request
    salt: s1
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: cheap, route: "model:cheap", share: 0.5}
""")
    narrowed = runtime.arm_policies[("math", "cheap")]
    assert (narrowed.candidates, narrowed.fallbacks) == (("cheap",), ())
    assert narrowed.quality_floor == runtime.source.policies.for_task("math").quality_floor  # type: ignore[union-attr]
    ranker = RecordingRanker()
    labels = Labels(task="math", risk="low")
    facts = RequestFacts(task="math", risk="low", prompt_tokens=100, max_output_tokens=100)
    for _ in range(3):
        decision = decide("auto", labels, facts, runtime, ranker, lambda _name: True,
                          restrict_to="cheap")
        assert decision.restricted and decision.deployments == ("cheap-1",)  # type: ignore[attr-defined]
    assert ranker.policies == [narrowed] * 3
    assert all(policy is narrowed for policy in ranker.policies)


def test_a_task_without_its_own_risk_rule_is_held_to_the_defaults() -> None:
    """`default`'s high-risk rule (zero data retention: big only) holds for summarization, which
    has no policy of its own, and for chat, whose policy sets no risk rule: a task hint naming
    chat no longer escapes it. A task opts out with an empty rule."""
    ruled = CONFIG.replace("    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n",
                           "    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n"
                           "    risk:\n      high: {candidates: [big]}\n", 1)
    chat = "    chat:\n      candidates: [cheap, mid]\n      quality_floor: {min: 0.99}\n"
    chat_all = chat.replace("[cheap, mid]", "[cheap, mid, big]").replace(
        "      quality_floor: {min: 0.99}\n", "")
    runtime = _runtime(ruled.replace(chat, chat_all))
    policies = runtime.source.policies
    assert policies is not None
    assert policies.for_task("chat").risk["high"].candidates == ("big",)
    assert policies.for_task("math").risk["high"].require_zero_data_retention  # its own
    assert policies.for_task("math").risk["high"].candidates is None
    high = _decide("chat", risk="high", runtime=runtime)
    assert high.deployments == ("big-1",)  # type: ignore[attr-defined]
    opted_out = _runtime(ruled.replace(chat, chat_all + "      risk: {high: {}}\n"))
    assert "cheap-1" in _decide("chat", risk="high",  # type: ignore[attr-defined]
                                runtime=opted_out).deployments


def test_a_task_without_its_own_cost_ceiling_is_held_to_the_defaults() -> None:
    """`default`'s ceiling holds for math, whose policy sets none: a request over it hinted as
    math is refused as it is under the default (it was served, at five times the ceiling). A
    task's own ceiling stands, and an explicit null opts out."""
    text = CONFIG.replace(
        "    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n",
        "    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n"
        "    max_cost_per_request_usd: 0.001\n", 1).replace(
        "      no_candidate_fallback: big\n",
        "      no_candidate_fallback: big\n      max_cost_per_request_usd: null\n").replace(
        "    chat:\n      candidates: [cheap, mid]\n",
        "    chat:\n      candidates: [cheap, mid]\n      max_cost_per_request_usd: 0.5\n")
    policies = _runtime(text).source.policies
    assert policies is not None
    assert [policies.for_task(t).max_cost_per_request_usd  # type: ignore[arg-type]
            for t in ("math", "summarization", "chat", "code")] == [0.001, 0.001, 0.5, None]
    over = _decide("math", prompt=1000, out=4000, runtime=_runtime(text))
    assert over.deployments == ()  # type: ignore[attr-defined]
    opted_out = text.replace("        high: {require_zero_data_retention: true}\n",
                             "        high: {require_zero_data_retention: true}\n"
                             "      max_cost_per_request_usd: null\n", 1)
    assert _decide("math", prompt=1000, out=4000,  # type: ignore[attr-defined]
                   runtime=_runtime(opted_out)).deployments


def test_policy_check_warns_of_rules_and_arms_that_can_never_serve() -> None:
    """Valid, but never working as written: chat inherits the default's high-risk rule (big
    only), which none of chat's models is; the experiment's arm pins chat to cheap, under chat's
    floor, so control answers all its requests. `policy check` says both (it said nothing)."""
    from policies.check import policy_warnings

    text = CONFIG.replace("    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n",
                          "    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n"
                          "    risk:\n      high: {candidates: [big]}\n", 1) + """experiments:
  - name: cheaper-chat
    tasks: [chat]
    unit: user
    salt: s1
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: mini, route: "model:cheap", share: 0.5}
"""
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("task chat: its high-risk rule allows only big, none of the "
                                  "task's models")
    assert warnings[1].startswith("experiment cheaper-chat: arm mini: model cheap is under "
                                  "task chat's floor")
    assert policy_warnings(load_config_text(CONFIG), QUALITY) == []


def test_policy_check_warns_of_a_zero_retention_rule_no_deployment_meets() -> None:
    """Chat's high-risk rule requires zero data retention of cheap and mid, whose deployments
    have none: every high-risk chat request is a 503 `no_eligible_model`, and the check said
    nothing. Math's rule is met by big's deployment (no warning: the base config has none)."""
    from policies.check import policy_warnings

    text = CONFIG.replace("      quality_floor: {min: 0.99}\n",
                          "      quality_floor: {min: 0.99}\n"
                          "      risk:\n        high: {require_zero_data_retention: true}\n", 1)
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert warnings == ["task chat: its high-risk rule requires zero data retention, which no "
                        "deployment of cheap, mid has: its high-risk requests have no route "
                        "(503 no_eligible_model)"]


def test_policy_check_warns_of_a_min_cost_task_with_no_e2e_target() -> None:
    """A non-streamed request is held to the E2E target only (its first token is the whole
    answer): a `min_cost` task with a TTFT target and no `e2e_p99_ms` sends such requests to
    the cheapest healthy model whatever their time. `policy check` says so, for that task only
    (`min_latency` still ranks them by their E2E; an E2E target silences it)."""
    from policies.check import policy_warnings

    ttft_only = CONFIG.replace("      quality_floor: {min: 0.99}\n      no_candidate_fallback",
                               "      quality_floor: {min: 0.99}\n      slo: {ttft_p95_ms: 800}\n"
                               "      no_candidate_fallback", 1)
    warnings = policy_warnings(load_config_text(ttft_only), QUALITY)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("task code: min_cost with TTFT/TPOT targets but no e2e_p99_ms")
    for fixed in ("slo: {ttft_p95_ms: 800, e2e_p99_ms: 20000}",
                  "objective: min_latency\n      slo: {ttft_p95_ms: 800}"):
        text = ttft_only.replace("slo: {ttft_p95_ms: 800}", fixed, 1)
        assert policy_warnings(load_config_text(text), QUALITY) == []


def test_a_default_without_an_e2e_target_is_warned_of_once_not_once_a_task() -> None:
    """The README's minimal config (a default with a TTFT target only) printed the same
    warning eleven times, once for every task inheriting it; it is one line now."""
    from policies.check import policy_warnings

    text = """version: 1
deployments:
  - {name: d, model: openai/m, adapter: openai_passthrough, api_base: 'http://127.0.0.1:9/v1'}
models: [{name: m, deployments: [d]}]
policies:
  default: {candidates: [m], objective: min_cost, slo: {ttft_p95_ms: 1000}}
"""
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert len(warnings) == 1 and warnings[0].startswith("every task: min_cost with TTFT/TPOT"), (
        warnings)


def test_a_request_no_model_may_serve_leaves_the_arm_ineligible_not_failed() -> None:
    """A request over the cost ceiling everywhere (the client's 400 `over_cost_ceiling`): the
    arm's model fails the ceiling as every model does, so the decision says the policy barred
    the arm, and the experiment records no outcome for it. It said nothing of the arm before
    (the decision with no candidate dropped the flag), so each such request was an arm error,
    and a client could halt a healthy arm with 25 of them."""
    quality = quality_table([_report([
        ("cheap", "summarization", 0.80, 0.78), ("big", "summarization", 0.92, 0.90),
        ("mid", "summarization", 0.85, 0.83)])], "q-under")
    capped = CONFIG.replace("relative_to: big, ratio: 0.95}",
                            "relative_to: big, ratio: 0.95}\n    max_cost_per_request_usd: 0.01")
    labels = Labels(task="summarization", risk="low")  # type: ignore[arg-type]
    facts = RequestFacts(task="summarization", risk="low", prompt_tokens=100,
                         max_output_tokens=10_000)
    decision = decide("auto", labels, facts, _runtime(capped, quality), StaticRanker(),
                      lambda _name: True, restrict_to="big")
    assert decision.deployments == () and decision.arm_ineligible


def test_a_floor_a_fixture_row_backs_is_warned_of() -> None:
    """A `method: fixture` result states its bound by hand, unchecked against its mean and n
    (the eval audit: mean 0.600 on 50 items written with lower 0.600, Wilson's being 0.462):
    `policy check` says which floors such rows back, instead of passing them in silence."""
    from policies.check import policy_warnings

    fixture = quality_table([EvalReport.model_validate({
        "suite": "hand", "suite_version": "1", "created": "2026-11-30", "results": [
            {"model": "cheap", "task": "math", "mean": 0.9, "lower": 0.9, "upper": 0.9,
             "n": 50, "method": "fixture"}]})], "qf")
    warnings = policy_warnings(load_config_text(CONFIG), fixture)
    assert [w for w in warnings if "fixture row" in w] == [
        "task math: cheap's accuracy is a fixture row (method: fixture, lower 0.9 as written, "
        "never checked against its mean and n): its floor is backed by no measurement; run "
        "`slorouter eval run` for one"], warnings
    assert not [w for w in policy_warnings(load_config_text(CONFIG), QUALITY) if "fixture" in w]


def test_policy_check_warns_of_default_settings_a_task_policy_does_not_take_over() -> None:
    """Only default's risk rules and cost ceiling carry over to a task policy that leaves them
    out: an `Idempotency-Key` required under default was escaped by `x-slorouter-task: code`,
    and code ran on the server's 120 s deadline instead of default's 20 s (the
    misconfiguration audit of 2026-12-06). `policy check` names what a task leaves out."""
    from policies.check import policy_warnings

    text = CONFIG.replace("    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n",
                          "    quality_floor: {metric: accuracy, relative_to: big, ratio: 0.95}\n"
                          "    require_idempotency_key: true\n    timeout_s: 20\n", 1)
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert [w.split(":")[0] for w in warnings] == ["task math", "task chat", "task code"]
    assert "does not set require_idempotency_key, timeout_s, which default sets" in warnings[0]
    kept = text.replace("      no_candidate_fallback: big\n",
                        "      no_candidate_fallback: big\n      require_idempotency_key: false\n"
                        "      timeout_s: 20\n", 1)  # set on the task, even to another value
    assert [w.split(":")[0] for w in policy_warnings(load_config_text(kept), QUALITY)] == [
        "task math", "task chat"]


def test_policy_check_warns_of_figures_in_the_wrong_unit() -> None:
    """Latency targets written in seconds, an E2E target under the TTFT one, a context window
    in thousands (`128`: every prompt over 128 tokens skipped the deployment and went to one
    12x the price): valid, accepted silently before."""
    from policies.check import policy_warnings

    text = (CONFIG.replace("context_window: 8000", "context_window: 128", 1)
            .replace("      quality_floor: {min: 0.99}\n      no_candidate_fallback",
                     "      quality_floor: {min: 0.99}\n"
                     "      slo: {ttft_p95_ms: 1.5, e2e_p99_ms: 1.0, tpot_p95_ms: 0.05}\n"
                     "      no_candidate_fallback", 1))
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert warnings == [
        "policies.tasks.code.slo.ttft_p95_ms: 1.5 ms: targets are in milliseconds "
        "(1.5 s is 1500)",
        "policies.tasks.code.slo.e2e_p99_ms: 1 ms: targets are in milliseconds (1 s is 1000)",
        "policies.tasks.code.slo.tpot_p95_ms: 0.05 ms: targets are in milliseconds "
        "(0.05 s is 50)",
        "policies.tasks.code.slo: e2e_p99_ms (1) is below ttft_p95_ms (1.5): a whole answer "
        "comes after its first token, so the E2E target is never met",
        "deployments.cheap-1.context_window: 128 tokens: every request over it skips the "
        "deployment (in thousands, 128k is 128000)"], warnings


def test_the_newest_report_of_a_result_wins_whatever_the_list_order() -> None:
    """Two reports of (cheap, math, accuracy): listed [newer, older], the older one's pass hid
    the newer one's failure, and reversed it failed: list order decided a floor check (the
    misconfiguration audit of 2026-12-06). The newest `created` wins; a tie, the later listed."""
    def report(created: str, mean: float, lower: float) -> EvalReport:
        return EvalReport.model_validate({
            "suite": "unit", "suite_version": "1", "created": created, "results": [
                {"model": "cheap", "task": "math", "mean": mean, "lower": lower,
                 "upper": min(1.0, 2 * mean - lower), "n": 500}]})

    older, newer = report("2026-11-01", 0.84, 0.81), report("2026-12-01", 0.70, 0.66)
    for order in ([older, newer], [newer, older]):
        found = quality_table(order, "q").get("cheap", "math", "accuracy")
        assert found is not None and found.mean == 0.70
    same_day = report("2026-12-01", 0.75, 0.71)
    found = quality_table([newer, same_day], "q").get("cheap", "math", "accuracy")
    assert found is not None and found.mean == 0.75


def test_policy_check_warns_of_a_guardrail_in_seconds_and_a_body_limit_nothing_fits() -> None:
    from policies.check import policy_warnings

    text = CONFIG.replace("policies:\n", "server: {max_body_bytes: 4}\npolicies:\n", 1) + """
experiments:
  - name: faster-chat
    tasks: [chat]
    unit: user
    salt: s1
    guardrails: [{kind: p95_ttft_ms, max_ms: 2}]
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: fast, route: "model:mid", share: 0.5}
"""
    warnings = policy_warnings(load_config_text(text), QUALITY)
    assert "experiments.faster-chat: guardrail p95_ttft_ms max_ms 2: in milliseconds" in \
        " | ".join(warnings), warnings
    assert any(w.startswith("server.max_body_bytes: 4 bytes") for w in warnings), warnings


def test_policy_check_warns_of_a_default_model_beside_policies() -> None:
    """`routes.default_model` reads as a fallback, but with a policies section every task is
    routed by its policy and the setting is never read: `policy check` says so, as it does of
    `routes.by_task` (it said nothing; the built-in default and the README set it)."""
    from policies.check import policy_warnings

    text = CONFIG.replace("policies:\n", "routes: {default_model: mid}\npolicies:\n", 1)
    assert policy_warnings(load_config_text(text), QUALITY) == [
        "routes.default_model is not used: with a policies section every task is routed by its "
        "policy (the default policy serves the tasks no other names)"]
    assert policy_warnings(load_config_text(CONFIG), QUALITY) == []


def test_policy_check_warns_of_no_alias_beside_policies() -> None:
    """`routes: {aliases: []}` beside policies leaves no name that routes by policy: every
    request must pin a model, and the policies route nothing (it started without a word)."""
    from policies.check import policy_warnings

    text = CONFIG.replace("policies:\n", "routes: {aliases: []}\npolicies:\n", 1)
    assert policy_warnings(load_config_text(text), QUALITY) == [
        "routes.aliases is empty: no model name routes by policy, so no request is routed by "
        "the policies (each must name a model); list `auto` there"]


def test_policy_check_warns_of_cache_rules_with_no_cache_backend() -> None:
    """`server.cache.backend: none` turns every policy's `cache.enabled` off without a word, so
    a task meant to be answered from the cache went upstream every time; `policy check` names
    the rules it leaves unused (and says nothing when no rule caches)."""
    from policies.check import policy_warnings

    caching = CONFIG.replace("    code:\n      candidates: [cheap, mid]\n",
                             "    code:\n      candidates: [cheap, mid]\n"
                             "      cache: {enabled: true}\n", 1)
    no_backend = "server: {cache: {backend: none}}\npolicies:\n"
    text = caching.replace("policies:\n", no_backend, 1)
    assert policy_warnings(load_config_text(text), QUALITY) == [
        "server.cache.backend is none: policies.tasks.code cache.enabled is not used (no answer "
        "is cached); choose backend disk or redis, or drop the rule"]
    assert policy_warnings(load_config_text(caching), QUALITY) == []
    assert policy_warnings(load_config_text(CONFIG.replace("policies:\n", no_backend, 1)),
                           QUALITY) == []


def test_policy_check_warns_of_the_servers_cache_rule_with_no_cache_backend() -> None:
    """`server.cache.default` (the rule of pinned models, and of every request without
    policies) is left unused by `backend: none` as the policies' rules are; it went unwarned,
    and without a policies section nothing was warned of at all (the docs audit of
    2026-12-07)."""
    from policies.check import policy_warnings

    server = "server: {cache: {backend: none, default: {enabled: true}}}\n"
    with_policies = CONFIG.replace("policies:\n", server + "policies:\n", 1)
    without = CONFIG.split("policies:\n")[0] + server + "routes: {default_model: cheap}\n"
    for text in (with_policies, without):
        assert policy_warnings(load_config_text(text), QUALITY) == [
            "server.cache.backend is none: server.cache.default cache.enabled is not used (no "
            "answer is cached); choose backend disk or redis, or drop the rule"]
    tiny_body = without.replace(server, "server: {max_body_bytes: 4}\n")
    assert [w.split(":")[0] for w in policy_warnings(load_config_text(tiny_body), QUALITY)] == [
        "server.max_body_bytes"]
