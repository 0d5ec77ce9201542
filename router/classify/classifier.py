"""The request classifier the service calls: model scores, rule findings, hints → `Labels`.

`LinearClassifier` implements the `Classifier` protocol over a compiled `LinearModel`;
`load_default_classifier()` loads the artifact shipped in `router/classify/artifacts/` once per
process. Feature extraction, rules, risk combination and training live in their own modules.
"""

from __future__ import annotations

import functools
import itertools
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from policies.labels import RISKS, TASKS, Risk, Signal, Task
from router.classify.detectors import Findings, detect, visible_text
from router.classify.features import feature_parts
from router.classify.linear import MODEL_FILE, LinearModel, Scores, load_model
from router.classify.pii import PiiKind
from router.classify.risk import combine_risk
from router.classify.types import Hints, Labels, RequestView
from router.errors import ConfigError

ARTIFACT_DIR = Path(__file__).resolve().parent / "artifacts"
# The heads the classifier reads and their labels, by position (training fits these), and the
# thresholds it reads.
HEAD_LABELS: Final[dict[str, tuple[str, ...]]] = {
    "task": TASKS,
    "risk": RISKS,
    "jailbreak": ("no", "yes"),
}
THRESHOLDS: Final = ("risk_high", "jailbreak")


@dataclass(frozen=True, slots=True)
class Explanation:
    """The labels with what led to them (for the CLI and debugging; never personal data)."""

    labels: Labels
    model_task: Task
    model_risk: Risk
    p_jailbreak: float
    pii_kinds: frozenset[PiiKind]
    side_effect_tools: tuple[str, ...]


def model_risk(risk_probs: tuple[float, ...], high_threshold: float) -> Risk:
    """`high` when P(high) reaches the threshold, else the likelier of `low` and `medium`."""
    low, medium, high = risk_probs
    if high >= high_threshold:
        return "high"
    return "medium" if medium > low else "low"


_A_DIGIT: Final = re.compile(r"\d")
# The P(jailbreak) at which the model confirms a weak jailbreak phrase (`Findings.weak_jailbreak`:
# "developer mode", "no filter", "jailbroken", ... which are ordinary outside a jailbreak
# prompt). No training row that is not a jailbreak reaches it (0 of 17,290; 550 of the 554
# jailbreak rows do), while the ordinary requests with such phrases that the rules flagged
# score 0.00-0.08.
WEAK_PHRASE_CONFIRMATION: Final = 0.1


def _signals(
    findings: Findings, task: Task, model_task: Task, acting: bool, risk: Risk,
    p_jailbreak: float, jb_threshold: float
) -> frozenset[Signal]:
    """The risk signals. The findings that depend on the task are judged on the model's own task
    as well as on `task` (a hint's): a task hint chooses the route, never the floor (a
    `summarization` hint took the regulated-advice floor away, even from a `raise_only` key).
    `acting`: an action taken to act (hinted, or the model's on enough evidence), which at the
    model's `high` risk is the `side_effects` signal (with a task hint, the hint's task).
    `jailbreak`: a phrase that counts alone, the model's head at its threshold, or a weak
    phrase the head leans towards (`WEAK_PHRASE_CONFIRMATION`)."""
    found = findings.signals(task)
    if model_task != task:
        found |= findings.signals(model_task)
    jailbreak = p_jailbreak >= jb_threshold or (
        findings.weak_jailbreak and p_jailbreak >= WEAK_PHRASE_CONFIRMATION)
    side_effects = acting and risk == "high"
    if not jailbreak and not side_effects:
        return found
    out = set(found)
    if jailbreak:
        out.add("jailbreak")
    if side_effects:
        out.add("side_effects")
    return frozenset(out)


# The least evidence on which the model's `action` is taken to act on the world (side-effecting:
# never retried once sent, never hedged). Short messages ("hey", "yes", "help", "book") were
# `action` 29-41% of the time, from CLINC's short lower-case commands; with both bounds 543 of
# the 575 held-out actions are side-effecting (561 before), and 6 of 408 short probes (122).
ACTION_MIN_PROBABILITY: Final = 0.7
ACTION_MIN_WORDS: Final = 3
_WORD: Final = re.compile(r"\w+")


def acts_on_evidence(p_action: float, user_text: str) -> bool:
    """Whether the model's `action` is sure enough to treat the request as side-effecting."""
    if p_action < ACTION_MIN_PROBABILITY:
        return False
    return sum(1 for _ in itertools.islice(_WORD.finditer(user_text), ACTION_MIN_WORDS)) \
        == ACTION_MIN_WORDS


class LinearClassifier:
    """Labels requests with a compiled linear model plus deterministic detectors."""

    def __init__(self, model: LinearModel, version: str) -> None:
        self._model = model
        self._version = version

    @property
    def version(self) -> str:
        """Content hash (sha256) of the model artifact."""
        return self._version

    @property
    def model(self) -> LinearModel:
        return self._model

    def scores(self, request: RequestView, user_text: str | None = None) -> Scores:
        """The model's calibrated probabilities for the request (`user_text`: the visible text
        of its last user message, when the caller has it)."""
        return self._model.predict_parts(*feature_parts(request, self._model.config, user_text))

    def _read(self, request: RequestView, user_text: str) -> tuple[Scores, bool]:
        """`scores` of the request as of its last user message, and whether the model knows a
        word of that message (`LinearModel.knows_a_word`, over the words it reads)."""
        words, others = feature_parts(through_last_user(request), self._model.config, user_text)
        return self._model.predict_parts(words, others), self._model.knows_a_word(words)

    def explain(self, request: RequestView, hints: Hints) -> Explanation:
        """Classify and keep the evidence."""
        labels, best_task, m_risk, p_jb, findings = self._decide(request, hints)
        return Explanation(
            labels, best_task, m_risk, p_jb, findings.pii, findings.side_effect_tools
        )

    def _decide(
        self, request: RequestView, hints: Hints
    ) -> tuple[Labels, Task, Risk, float, Findings]:
        """The labels, the model's task and risk, P(jailbreak) and the rule findings."""
        # The visible text (`detectors.visible`, each message made visible once) is what the
        # rules and the model read; a message of only whitespace or invisible characters (a
        # zero-width space) is empty.
        text = visible_text(request)
        findings = detect(request, text)
        user = text.last_user
        scores, knows_a_word = self._read(request, user)
        probs = scores.probs
        task_p = probs["task"]
        risk_p = probs["risk"]
        task_probs = dict(zip(TASKS, task_p, strict=True))
        risk_probs = dict(zip(RISKS, risk_p, strict=True))
        best_task = TASKS[task_p.index(max(task_p))]  # the first likeliest, as `max` picks
        m_risk = model_risk(risk_p, self._model.thresholds["risk_high"])
        empty = not user or user.isspace()  # `not user.strip()` without copying the text
        # A message none of whose words the model knows (Chinese, Russian, Arabic, emoji only)
        # is labelled by its shape alone: 11 of 15 Chinese requests and every emoji were
        # `autocomplete`. The model has no task for it, so it gets the default, as an empty one
        # does; its risk is still the model's and the rules' (they read every character).
        # Arithmetic (digits, no letters) is read, as shape features: "2+2", "(3+4)*5-2/7=?"
        # are the model's `math`; digits among unknown words ("我的电话是 138...") are not.
        unread = empty or not (knows_a_word or (_A_DIGIT.search(user) is not None
                                                and not any(ch.isalpha() for ch in user)))
        task: Task = hints.task if hints.task is not None else ("chat" if unread else best_task)
        source: Literal["model", "hint", "default"] = (
            "hint" if hints.task is not None else ("default" if unread else "model")
        )
        m_risk = "low" if empty else m_risk
        p_jb = 0.0 if empty else probs["jailbreak"][1]
        model_task: Task = "chat" if unread else best_task
        # A task hint is the client's word on what its request does, so it decides whether an
        # action acts (its retries and hedges are the client's own); the model's action acts on
        # enough evidence only.
        model_acts = source == "model" and task == "action" and acts_on_evidence(
            task_probs["action"], user)
        acting = model_acts or (source == "hint" and task == "action")
        signals = _signals(findings, task, model_task, acting, m_risk, p_jb,
                           self._model.thresholds["jailbreak"])
        labels = Labels(
            task=task,
            risk=combine_risk(m_risk, signals, hints.risk, hints.risk_may_lower),
            task_probs=task_probs,
            risk_probs=risk_probs,
            signals=signals,
            task_source=source,
            acts=source != "model" or model_acts,
        )
        return labels, best_task, m_risk, p_jb, findings

    def classify(self, request: RequestView, hints: Hints) -> Labels:
        """Task and risk of the request; hints win for task, and may move risk only above the
        floor that the detected signals set (and only up, when `hints.risk_may_lower` is
        False)."""
        return self._decide(request, hints)[0]


def through_last_user(request: RequestView) -> RequestView:
    """The request as of its last user message, the turns after it (an assistant's tool calls,
    the tools' results, a prefill) left out: what the model reads. So every call of one agent
    turn, the one that asks for a tool and those that hand back its results, is labelled
    alike: the structure features of a tool result's call (its last role, its message count)
    moved one loop from `reasoning_analysis` to `chat`, and to another model (the agent
    tool-loop audit of 2026-12-07), and the model, trained on requests that end with their
    user's message, read them out of its training. The rules read every message: a tool's
    result may carry an injection or personal data."""
    messages = request.messages
    for index in range(len(messages) - 1, -1, -1):
        if messages[index][0] == "user":
            if index == len(messages) - 1:
                return request
            return replace(request, messages=messages[:index + 1])
    return request


def contract_problems(model: LinearModel) -> list[str]:
    """Where the model differs from what `LinearClassifier` reads of it (empty when nowhere):
    the heads of `HEAD_LABELS` with those labels in that order (the probabilities are read by
    position: labels stored in another order were served as other labels) and the
    `THRESHOLDS` in [0, 1] (without `risk_high` the artifact loaded, then every request raised
    KeyError)."""
    problems: list[str] = []
    heads = {head.name: head.labels for head in model.heads}
    for name, labels in HEAD_LABELS.items():
        if name not in heads:
            problems.append(f"no {name!r} head (heads: {sorted(heads)})")
        elif heads[name] != labels:
            problems.append(
                f"the {name!r} head's labels are {list(heads[name])}, the classifier reads "
                f"{list(labels)} in this order"
            )
    for name in THRESHOLDS:
        value = model.thresholds.get(name)
        if value is None:
            problems.append(f"no {name!r} threshold (thresholds: {sorted(model.thresholds)})")
        elif not 0.0 <= value <= 1.0:
            problems.append(f"the {name!r} threshold is {value}, not a probability")
    return problems


def load_classifier(path: Path) -> LinearClassifier:
    """The classifier stored at `path` (a `model.zip`); raises ConfigError naming what is wrong
    when it is unreadable or is not the model the classifier reads (`contract_problems`)."""
    try:
        model, digest = load_model(path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError([f"classifier artifact {path}: {exc}"]) from exc
    problems = contract_problems(model)
    if problems:
        raise ConfigError([f"classifier artifact {path}: {problem}" for problem in problems])
    return LinearClassifier(model, digest)


@functools.cache
def load_default_classifier() -> LinearClassifier:
    """The classifier shipped in the package, loaded once per process."""
    return load_classifier(ARTIFACT_DIR / MODEL_FILE)
