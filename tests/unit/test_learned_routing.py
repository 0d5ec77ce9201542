"""Learned per-request routing in the policy decision, with a router trained on GSM8K rows."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from evals.train_router import TrainRequest, train
from policies.eligibility import RequestFacts
from policies.learned.artifact import load_artifact
from policies.learned.decide import choose
from policies.loader import load_config_text
from router.classify.types import Labels
from router.decide import StaticRanker, decide
from router.errors import ConfigError
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


def _config(artifact: Path, policies: str | None = None,
            prices: tuple[float, ...] | None = None) -> str:
    """Each candidate model on one deployment, priced 1, 2, ... in the trained order (cheapest
    first) unless `prices` says otherwise."""
    models = load_artifact(artifact).rule.candidates
    prices = prices if prices is not None else tuple(range(1, len(models) + 1))
    deployments = "".join(
        f"\n  - {{name: {m}-d, model: openai/{m}, input_price_per_mtok: {p}, "
        f"output_price_per_mtok: {p}}}" for m, p in zip(models, prices, strict=True))
    model_list = "".join(f"\n  - {{name: {m}, deployments: [{m}-d]}}" for m in models)
    return f"""version: 1
deployments:{deployments}
models:{model_list}
routes: {{default_model: {models[0]}}}
policies:
""" + (policies if policies is not None else f"""  default:
    candidates: [{", ".join(models)}]
    learned_router: {artifact.name}
""")


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


def test_the_cheapest_model_is_the_cheapest_on_the_configured_prices(artifact: Path) -> None:
    """The artifact orders its models by the prices of its training data (Mixtral first, at a
    fraction of GPT-4's). Configured the other way round (Mixtral at 20 times GPT-4's price),
    a prompt both models are predicted to clear goes to GPT-4, the cheaper one here: the
    decision reads the configured prices, not the data's."""
    router = load_artifact(artifact)
    trained = router.rule.candidates
    config = load_config_text(_config(artifact, prices=(20.0, 1.0)))
    runtime = resolve(config, {}, lambda _m: None, learned=load_learned(config, artifact.parent))
    reversed_rule = replace(router.rule, candidates=tuple(reversed(trained)))
    moved = 0
    for prompt in _prompts(60):
        probs = router.predictor.predict(prompt, "math")
        facts = RequestFacts(task="math", risk="low", prompt_tokens=200, max_output_tokens=200,
                             prompt_text=prompt)
        decision = decide("auto", Labels(task="math", risk="low"), facts, runtime,
                          StaticRanker(), lambda _n: True)
        assert decision.model == choose(reversed_rule, probs)
        moved += choose(router.rule, probs) == trained[0] != decision.model
    assert moved > 0  # prompts the trained order sent to the dearer model


def test_learned_router_version_joins_the_policy_version(artifact: Path) -> None:
    """Loading the artifact changes the policy version (a retrained router is a new policy)."""
    config = load_config_text(_config(artifact))
    without = resolve(config, {}, lambda _m: None)
    with_router = resolve(config, {}, lambda _m: None,
                          learned=load_learned(config, artifact.parent))
    assert without.version != with_router.version


STRONG, WEAK = "gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1"


def test_artifact_is_trained_on_the_task_label_the_router_passes(artifact: Path) -> None:
    """GSM8K rows are trained as task `math` (what the router sends for them), so the full
    model runs online: its prediction differs from the shape-only back-off for unseen tasks."""
    router = load_artifact(artifact)
    assert router.tasks == ("math",)
    prompt = _prompts(1)[0]
    assert router.predictor.predict(prompt, "math") != router.predictor.predict(prompt, "gsm8k")


def test_learned_router_is_skipped_for_tasks_it_was_not_trained_for(artifact: Path) -> None:
    """A `code` request under the same policy keeps the policy's own ranking."""
    config = load_config_text(_config(artifact))
    learned = load_learned(config, artifact.parent)
    with_router = resolve(config, {}, lambda _m: None, learned=learned)
    without = resolve(config, {}, lambda _m: None)
    for prompt in _prompts(20):
        labels = Labels(task="code", risk="low")
        facts = RequestFacts(task="code", risk="low", prompt_tokens=200, max_output_tokens=200,
                             prompt_text=prompt)
        routed = decide("auto", labels, facts, with_router, StaticRanker(), lambda _n: True)
        plain = decide("auto", labels, facts, without, StaticRanker(), lambda _n: True)
        assert routed.deployments == plain.deployments


def _policy(task: str, floor: str) -> str:
    return f"""  default:
    candidates: [{WEAK}, {STRONG}]
  tasks:
    {task}:
      candidates: [{WEAK}, {STRONG}]
      learned_router: gsm8k-router
      quality_floor: {floor}
"""


def test_artifact_covering_none_of_its_policies_tasks_is_refused(artifact: Path) -> None:
    """Named only by the `code` policy, a router trained for `math` is a start-up error."""
    config = load_config_text(_config(artifact, _policy(
        "code", f"{{relative_to: {STRONG}, ratio: 0.95}}")))
    with pytest.raises(ConfigError) as err:
        load_learned(config, artifact.parent)
    assert len(err.value.problems) == 1
    assert "trained for tasks ['math'], none of the tasks its policies serve ['code']" in str(
        err.value.problems[0])


@pytest.mark.parametrize("floor", [f"{{relative_to: {STRONG}, ratio: 0.95}}", "{min: 0.5}"])
def test_artifact_calibrated_to_the_policys_floor_or_above_loads(artifact: Path,
                                                                  floor: str) -> None:
    """Trained at 0.95 x GPT-4 (about 0.82 on GSM8K): a policy at that floor or below loads."""
    config = load_config_text(_config(artifact, _policy("math", floor)))
    assert artifact.name in load_learned(config, artifact.parent)


def test_artifact_calibrated_below_the_policys_floor_lists_every_problem(artifact: Path) -> None:
    """A higher ratio, another reference and a higher absolute floor are each a problem,
    all reported at once, naming the policy and both floors."""
    router = load_artifact(artifact)
    assert router.floor is not None and router.floor.quality is not None
    too_high = round(router.floor.quality + 0.05, 2)
    text = _config(artifact, f"""  default:
    candidates: [{WEAK}, {STRONG}]
    learned_router: gsm8k-router
    quality_floor: {{min: {too_high}}}
  tasks:
    math:
      candidates: [{WEAK}, {STRONG}]
      learned_router: gsm8k-router
      quality_floor: {{relative_to: {STRONG}, ratio: 0.97}}
    reasoning_analysis:
      candidates: [{WEAK}, {STRONG}]
      learned_router: gsm8k-router
      quality_floor: {{relative_to: {WEAK}, ratio: 0.95}}
""")
    with pytest.raises(ConfigError) as err:
        load_learned(load_config_text(text), artifact.parent)
    problems = [str(p) for p in err.value.problems]
    assert len(problems) == 3
    assert f"(used by policies.default): calibrated to 0.95 x {STRONG} = " in problems[0]
    assert f"below the policy's floor of min {too_high}" in problems[0]
    assert f"below the policy's floor of 0.97 x {STRONG}" in problems[1]
    assert "(another reference model)" in problems[2]


@pytest.mark.parametrize("broken", ["metadata-not-json", "metadata-a-list", "junk-model",
                                    "floor-fraction-null", "floor-quality-a-word"])
def test_a_malformed_artifact_is_an_artifact_error_not_a_traceback(
        tmp_path: Path, artifact: Path, broken: str) -> None:
    """Metadata that is not a JSON object, or a model file joblib cannot read (its sha256
    matching), is one `ArtifactError` naming the file (`serve` and `policy check` print it)."""
    import hashlib
    import shutil

    from policies.learned.artifact import METADATA_FILE, MODEL_FILE, ArtifactError

    copy = tmp_path / "copy"
    shutil.copytree(artifact, copy)
    if broken == "metadata-not-json":
        (copy / METADATA_FILE).write_text("not json")
    elif broken == "metadata-a-list":
        (copy / METADATA_FILE).write_text("[]")
    elif broken.startswith("floor-"):  # a hand edit the model file's hash does not cover
        meta = json.loads((copy / METADATA_FILE).read_text())
        meta["floor"] = {**meta["floor"], **({"fraction": None} if broken.endswith("null")
                                             else {"quality": "high"})}
        (copy / METADATA_FILE).write_text(json.dumps(meta))
    else:
        (copy / MODEL_FILE).write_bytes(b"junk, not a joblib file")
        meta = json.loads((copy / METADATA_FILE).read_text())
        meta["artifact_sha256"] = hashlib.sha256(b"junk, not a joblib file").hexdigest()
        (copy / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError):
        load_artifact(copy)


CRUX = Path(__file__).resolve().parents[2] / "evals" / "datasets" / "routing_multi" / \
    "zeroeval_math_code.jsonl.gz"
CRUX_MODELS = ("gemini-1.5-flash", "gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06")


def test_a_pick_among_the_policys_fallbacks_never_puts_the_cheapest_first(
        tmp_path: Path) -> None:
    """Trained on three CruxEval models, the router sends most prompts to gpt-4o, which the
    policy lists as a fallback only (the shape of the embedded default). Such a prompt goes to
    the candidate most likely to succeed, never to the one calibration ruled out for being too
    weak: the pick, not among the candidates, left the policy's cheapest-first order, and
    gemini served two thirds of the prompts first (the learned-routing audit of 2026-12-07)."""
    out = tmp_path / "crux3"
    train(TrainRequest(outcomes=CRUX, out=out, benchmark="cruxeval", models=CRUX_MODELS,
                       folds=2))
    gemini, mini, strong = CRUX_MODELS
    prices = {gemini: 0.075, mini: 0.15, strong: 2.5}
    deployments = "".join(f"\n  - {{name: {m}-d, model: openai/{m}, input_price_per_mtok: {p}, "
                          f"output_price_per_mtok: {p * 4}}}" for m, p in prices.items())
    models = "".join(f"\n  - {{name: {m}, deployments: [{m}-d]}}" for m in prices)
    config = load_config_text(f"""version: 1
deployments:{deployments}
models:{models}
routes: {{default_model: {mini}}}
policies:
  default:
    candidates: [{gemini}, {mini}]
    fallbacks: [{strong}]
    learned_router: crux3
""")
    learned = load_learned(config, tmp_path)
    runtime = resolve(config, {}, lambda _m: None, learned=learned)
    router = learned["crux3"]
    assert gemini not in router.rule.candidates  # calibration ruled it out
    with gzip.open(CRUX, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    prompts = [row["prompt"] for row in rows if row["benchmark"] == "cruxeval"][:60]
    to_strong = 0
    for prompt in prompts:
        facts = RequestFacts(task="code", risk="low", prompt_tokens=300, max_output_tokens=300,
                             prompt_text=prompt)
        decision = decide("auto", Labels(task="code", risk="low"), facts, runtime,
                          StaticRanker(), lambda _n: True)
        to_strong += choose(router.rule, router.predictor.predict(prompt, "code")) == strong
        assert decision.model == mini, prompt[:80]
        assert decision.deployments[-1] == f"{strong}-d"  # still the fallback, after both
    assert to_strong > 20  # the case: prompts the router sends to the fallback


def test_a_prompt_unlike_the_training_data_goes_to_the_reference(artifact: Path) -> None:
    """A greeting shorter than any GSM8K problem, and eight problems joined (longer than any),
    lie outside the training prompts' shape range: the router's predictions there extrapolate
    ("hi": Mixtral 0.925 against GPT-4's 0.707; the joined problems near 0 for both, so the
    margin rule sent them to the cheaper model: the policies audit of 2026-12-07), so the
    calibration's reference goes first. A training-like prompt is still the router's."""
    config = load_config_text(_config(artifact))
    learned = load_learned(config, artifact.parent)
    runtime = resolve(config, {}, lambda _m: None, learned=learned)
    router = learned[artifact.name]
    problems = _prompts(8)

    def first(prompt: str) -> str:
        facts = RequestFacts(task="math", risk="low", prompt_tokens=200, max_output_tokens=200,
                             prompt_text=prompt)
        return decide("auto", Labels(task="math", risk="low"), facts, runtime, StaticRanker(),
                      lambda _n: True).model

    for odd in ("hi", "\n\n".join(problems)):
        assert not router.predictor.featurizer.familiar(odd)
        assert first(odd) == router.rule.fallback
    assert all(router.predictor.featurizer.familiar(p) for p in problems)
    assert [first(p) for p in problems] == [
        choose(router.rule, router.predictor.predict(p, "math")) for p in problems]
