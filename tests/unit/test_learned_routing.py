"""Learned per-request routing in the policy decision, with a router trained on GSM8K rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evals.train_router import TrainRequest, train
from policies.eligibility import RequestFacts
from policies.learned.artifact import load_artifact
from policies.learned.decide import choose
from policies.loader import load_config_text
from router.classify.types import Labels
from router.decide import StaticRanker, decide
from router.runtime_config import resolve
from router.wiring import load_learned

DATA = Path(__file__).resolve().parents[2] / "evals" / "datasets" / "routing" / "gsm8k.jsonl.gz"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("router") / "gsm8k-router"
    train(TrainRequest(outcomes=DATA, out=out, folds=2))
    return out


def _prompts(count: int) -> list[str]:
    with gzip.open(DATA, "rt", encoding="utf-8") as lines:
        return [json.loads(line)["prompt"] for _, line in zip(range(count), lines, strict=False)]


def _config(artifact: Path) -> str:
    models = load_artifact(artifact).rule.candidates
    deployments = "".join(
        f"\n  - {{name: {m}-d, model: openai/{m}, input_price_per_mtok: {i + 1}, "
        f"output_price_per_mtok: {i + 1}}}" for i, m in enumerate(models))
    model_list = "".join(f"\n  - {{name: {m}, deployments: [{m}-d]}}" for m in models)
    return f"""version: 1
deployments:{deployments}
models:{model_list}
routes: {{default_model: {models[0]}}}
policies:
  default:
    candidates: [{", ".join(models)}]
    learned_router: {artifact.name}
"""


def test_the_model_the_learned_router_chooses_is_tried_first(artifact: Path) -> None:
    """For real prompts, the first deployment belongs to the model `choose` picks from the
    router's own predictions, and the router does not send everything to one model."""
    config = load_config_text(_config(artifact))
    learned = load_learned(config, artifact.parent)
    runtime = resolve(config, {}, lambda _m: None, learned=learned)
    router = learned[artifact.name]
    firsts = []
    for prompt in _prompts(60):
        labels = Labels(task="math", risk="low")
        facts = RequestFacts(task="math", risk="low", prompt_tokens=200, max_output_tokens=200,
                             prompt_text=prompt)
        decision = decide("auto", labels, facts, runtime, StaticRanker(), lambda _n: True)
        expected = choose(router.rule, router.predictor.predict(prompt, "math"))
        assert decision.model == expected
        firsts.append(decision.model)
    assert len(set(firsts)) == 2


def test_learned_router_version_joins_the_policy_version(artifact: Path) -> None:
    """Loading the artifact changes the policy version (a retrained router is a new policy)."""
    config = load_config_text(_config(artifact))
    without = resolve(config, {}, lambda _m: None)
    with_router = resolve(config, {}, lambda _m: None,
                          learned=load_learned(config, artifact.parent))
    assert without.version != with_router.version
