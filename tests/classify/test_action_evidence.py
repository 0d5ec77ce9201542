"""Which `action` requests act on the world, and which floors a task hint cannot take away.

An `action` is side-effecting: once sent it is never retried nor hedged. The model called short
messages `action` from CLINC's short lower-case commands ("hey", "please", "help", "hello 3"),
so a hung greeting was a 504 `unknown_commit`. The model's action now acts on enough evidence
only (`acts_on_evidence`); a client's task hint is its word on its own request.
"""

from __future__ import annotations

import pytest

from router.classify.classifier import (
    ACTION_MIN_PROBABILITY,
    ACTION_MIN_WORDS,
    acts_on_evidence,
    load_default_classifier,
)
from router.classify.types import Hints, Labels, RequestView
from router.pipeline import is_side_effecting


def _labels(text: str, hints: Hints | None = None) -> Labels:
    view = RequestView(messages=(("user", text),))
    return load_default_classifier().classify(view, hints if hints is not None else Hints())


@pytest.mark.parametrize("text", ["hey", "hello 3", "please", "go ahead", "help"])
def test_a_short_message_is_not_taken_to_act(text: str) -> None:
    labels = _labels(text)
    assert not is_side_effecting(labels), labels
    if labels.task == "action":
        assert not labels.acts


@pytest.mark.parametrize("text", [
    "Transfer $500 from checking to savings",
    "book a table for two at 7pm tonight",
    "set an alarm for 6 am tomorrow",
])
def test_a_clear_command_still_acts(text: str) -> None:
    labels = _labels(text)
    assert labels.task == "action" and labels.acts
    assert is_side_effecting(labels)


def test_a_hinted_action_acts_however_short() -> None:
    """The client says what its request does: `hey` hinted `action` is held to one call."""
    labels = _labels("hey", Hints(task="action"))
    assert labels.task_source == "hint" and labels.acts
    assert is_side_effecting(labels)


@pytest.mark.parametrize(("p_action", "text", "acts"), [
    (ACTION_MIN_PROBABILITY, "cancel my order", True),
    (ACTION_MIN_PROBABILITY - 1e-9, "cancel my order now", False),
    (1.0, "cancel order", False),
    (1.0, "  cancel   my\norder!", True),
    (1.0, "لغو سفارش من", True),  # words of any script count
])
def test_acts_on_evidence_needs_both_bounds(p_action: float, text: str, acts: bool) -> None:
    assert ACTION_MIN_WORDS == 3
    assert acts_on_evidence(p_action, text) is acts


@pytest.mark.parametrize("task_hint", ["summarization", "autocomplete", "extraction"])
@pytest.mark.parametrize("text", [
    "Should I put my entire savings into bitcoin?",
    "I'm pregnant, is it safe to take paracetamol?",
    "Should I refinance my mortgage now?",
])
def test_a_task_hint_does_not_take_the_advice_floor_away(task_hint: str, text: str) -> None:
    """Regulated advice counts for advice-seeking tasks, and was judged on the hinted task: a
    `summarization` hint took its `medium` floor away, even from a key whose risk hints may
    only raise (`raise_only`). The model's own task counts too now; the hint still routes."""
    unhinted = _labels(text)
    assert "regulated_domain" in unhinted.signals
    for may_lower in (False, True):
        hinted = _labels(text, Hints(task=task_hint, risk="low", risk_may_lower=may_lower))  # type: ignore[arg-type]
        assert hinted.task == task_hint
        assert "regulated_domain" in hinted.signals
        assert hinted.risk in ("medium", "high")
