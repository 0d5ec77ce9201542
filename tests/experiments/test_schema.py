"""The experiment spec: what a policy file may say and what it is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from pydantic import ValidationError

from policies.experiments.schema import ExperimentSpec, QualityFloorGuardrail
from tests.experiments.support import make_spec

EXAMPLE = """
name: chat-cheaper
tasks: [chat, summarization]
unit: user
salt: "2025-06-a"
start: 2025-06-01T00:00:00Z
arms:
  - {name: control, route: "policy:chat-default", control: true, share: 0.8}
  - {name: small, route: "model:gpt-4o-mini", share: 0.2}
metrics:
  - {name: thumbs_up, kind: binary}
  - {name: rating, kind: continuous, range: [1, 5]}
guardrails:
  - {kind: quality_floor, metric: thumbs_up, floor: 0.7, min_sample: 50, window: 300}
  - {kind: error_rate, max_rate: 0.05, min_sample: 100, window: 500}
  - {kind: p95_ttft_ms, max_ms: 2500}
  - {kind: cost_per_request, max_usd: 0.01}
sequential: {alpha: 0.05, min_sample: 100, primary_metric: ttft_ms}
"""


def test_documented_example_parses_with_typed_guardrails() -> None:
    """The example from docs/experiments.md loads, guardrails typed by their `kind`."""
    spec = ExperimentSpec.model_validate(yaml.safe_load(EXAMPLE))
    assert spec.control.name == "control"
    assert [a.name for a in spec.treatments] == ["small"]
    assert isinstance(spec.guardrails[0], QualityFloorGuardrail)
    assert spec.metric("rating") is not None


def test_every_problem_is_listed_at_once() -> None:
    """Two controls, bad shares and an undeclared guardrail metric are all reported together."""
    with pytest.raises(ValidationError) as caught:
        make_spec(
            arms=[
                {"name": "a", "route": "model:x", "control": True, "share": 0.5},
                {"name": "b", "route": "model:y", "control": True, "share": 0.4},
            ],
            guardrails=[{"kind": "quality_floor", "metric": "nope", "floor": 0.5}],
        )
    message = str(caught.value)
    assert "exactly one arm" in message
    assert "sum to 1" in message
    assert "undeclared metric 'nope'" in message


def test_unknown_fields_are_refused() -> None:
    """A typo in a field name fails at load (extra="forbid")."""
    with pytest.raises(ValidationError, match="shares"):
        make_spec(shares=[0.5, 0.5])


def test_naive_datetimes_and_inverted_windows_are_refused() -> None:
    """start/stop must carry a timezone and start must precede stop."""
    with pytest.raises(ValidationError, match="timezone"):
        make_spec(start=datetime(2025, 1, 1))
    with pytest.raises(ValidationError, match="start must be before stop"):
        make_spec(start=datetime(2025, 2, 1, tzinfo=UTC), stop=datetime(2025, 1, 1, tzinfo=UTC))


def test_guardrail_window_must_hold_its_minimum_sample() -> None:
    """A window smaller than min_sample could never fire, so it is refused."""
    with pytest.raises(ValidationError, match="window"):
        make_spec(guardrails=[{"kind": "error_rate", "max_rate": 0.1, "min_sample": 200,
                               "window": 100}])


def test_binary_metric_range_is_fixed_and_primary_metric_must_exist() -> None:
    """A binary metric cannot declare another range; the primary metric must be known."""
    with pytest.raises(ValidationError, match="binary metric"):
        make_spec(metrics=[{"name": "ok", "kind": "binary", "range": [0, 5]}])
    with pytest.raises(ValidationError, match="primary_metric"):
        make_spec(sequential={"primary_metric": "happiness"})


def test_repeated_arm_and_metric_names_are_named() -> None:
    """An arm or metric name used twice is refused, and the message names it."""
    with pytest.raises(ValidationError) as caught:
        make_spec(
            arms=[
                {"name": "a", "route": "model:x", "control": True, "share": 0.5},
                {"name": "a", "route": "model:y", "share": 0.5},
            ],
            metrics=[{"name": "ok", "kind": "binary"}, {"name": "ok", "kind": "binary"}],
        )
    message = str(caught.value)
    assert "arm name 'a' appears 2 times" in message
    assert "metric name 'ok' appears 2 times" in message


@pytest.mark.parametrize("floor", [70, -0.1, 1.5])
def test_a_quality_floor_outside_its_metrics_range_is_refused(floor: float) -> None:
    """`floor: 70` (meant as 70%) on a binary metric would halt every arm at its first
    `min_sample` values, whatever their quality; below the range it could never fire."""
    with pytest.raises(ValidationError, match=f"floor {floor:g} is outside the metric's range"):
        make_spec(metrics=[{"name": "ok", "kind": "binary"}],
                  guardrails=[{"kind": "quality_floor", "metric": "ok", "floor": floor}])


@pytest.mark.parametrize("guardrail", [
    {"kind": "quality_floor", "metric": "ok", "floor": float("nan")},
    {"kind": "p95_ttft_ms", "max_ms": float("inf")},
    {"kind": "cost_per_request", "max_usd": float("inf")},
])
def test_guardrail_thresholds_must_be_finite(guardrail: dict[str, object]) -> None:
    """A NaN floor halted every arm (no bound is >= NaN); an infinite ceiling never fires."""
    with pytest.raises(ValidationError, match="finite number"):
        make_spec(metrics=[{"name": "ok", "kind": "binary"}], guardrails=[guardrail])


def test_a_floor_at_the_edge_of_the_range_is_allowed() -> None:
    """A continuous metric's floor may sit anywhere in its declared range, ends included."""
    spec = make_spec(metrics=[{"name": "rating", "kind": "continuous", "range": [1, 5]}],
                     guardrails=[{"kind": "quality_floor", "metric": "rating", "floor": 5}])
    assert isinstance(spec.guardrails[0], QualityFloorGuardrail)
    assert spec.guardrails[0].floor == 5


SERVED_CONFIG = """version: 1
deployments:
  - {name: fast-d, model: openai/fast, adapter: openai_passthrough, api_base: 'http://127.0.0.1:9/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: large-d, model: openai/large, adapter: openai_passthrough,
     api_base: 'http://127.0.0.1:9/v1', input_price_per_mtok: 5, output_price_per_mtok: 5}
models: [{name: fast, deployments: [fast-d]}, {name: large, deployments: [large-d]}]
policies:
  default: {candidates: [fast]}
  tasks:
    code: {candidates: [large]}
experiments:
  - name: cheaper
    tasks: [chat]
    salt: s1
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: big, route: "model:large", share: 0.5}
    metrics: [{name: thumbs_up, kind: binary}]
"""


def test_the_served_version_follows_what_the_arms_resolve_to() -> None:
    """An experiment's shared outcomes and halts are kept under `served_version`: the spec and
    what its routes resolve to. A rolling deploy that moved control's policy to another model,
    or pointed an arm's model at another provider model, kept the spec's version and mixed two
    routes' outcomes in one arm (the rollout audit); guardrails, and a task the experiment
    does not run on, leave it."""
    from policies.experiment_version import served_version
    from policies.loader import load_config_text

    def version(text: str) -> str:
        config = load_config_text(text)
        return served_version(config.experiments[0], config)

    base = version(SERVED_CONFIG)
    assert version(SERVED_CONFIG.replace("default: {candidates: [fast]}",
                                         "default: {candidates: [large]}")) != base
    assert version(SERVED_CONFIG.replace("model: openai/large,", "model: openai/large-2,")) != base
    assert version(SERVED_CONFIG.replace("code: {candidates: [large]}",
                                         "code: {candidates: [fast]}")) == base
    guarded = SERVED_CONFIG.replace(
        "    metrics: [{name: thumbs_up, kind: binary}]\n",
        "    metrics: [{name: thumbs_up, kind: binary}]\n"
        "    guardrails: [{kind: error_rate, max_rate: 0.1}]\n")
    assert version(guarded) == base


def test_the_served_version_follows_resolved_prices_and_learned_routers() -> None:
    """What the config leaves to elsewhere changes what control's route serves too: a model's
    resolved prices or capabilities (litellm's table, upgraded) and the learned router its
    policy names (retrained in place). The served version followed neither, so a shared store
    pooled two routings' outcomes (the policies audit of 2026-12-07); a model no arm or policy
    of the experiment names leaves it."""
    from policies.experiment_version import served_version
    from policies.loader import load_config_text

    config = load_config_text(SERVED_CONFIG)
    spec = config.experiments[0]
    facts = {"fast": "aaa", "large": "bbb", "unused": "ccc"}
    base = served_version(spec, config, facts, {})
    assert served_version(spec, config, {**facts, "fast": "ddd"}, {}) != base
    assert served_version(spec, config, {**facts, "unused": "eee"}, {}) == base
    learned = load_config_text(SERVED_CONFIG.replace("default: {candidates: [fast]}",
                                                     "default: {candidates: [fast], "
                                                     "learned_router: lr}"))
    first = served_version(learned.experiments[0], learned, facts, {"lr": "v1"})
    assert served_version(learned.experiments[0], learned, facts, {"lr": "v2"}) != first
