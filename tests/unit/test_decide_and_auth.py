"""Deciding a route and authenticating a caller: pure functions over the runtime config."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.eligibility import RequestFacts, Verdict
from policies.loader import load_config_text
from policies.schema import TaskPolicy
from router.auth import ANONYMOUS, authenticate
from router.classify.types import Labels
from router.decide import Decision, Ranked, Ranker, StaticRanker, decide
from router.errors import AuthenticationError, NotFoundError
from router.runtime_config import Principal, resolve
from tests.unit.test_config import ENV, VALID, _prices

RUNTIME = resolve(load_config_text(VALID, environ=ENV), ENV, _prices)


def _decide(requested: str, task: str, ranker: Ranker | None = None) -> Decision:
    labels = Labels(task=task, risk="low")  # type: ignore[arg-type]
    facts = RequestFacts(task=labels.task, risk="low", prompt_tokens=10, max_output_tokens=10)
    return decide(requested, labels, facts, RUNTIME, ranker or StaticRanker(), lambda _: True)


class _Seen:
    """A ranker that has seen `missing` miss the SLO, and explores `probe` (first) if set."""

    def __init__(self, missing: set[str], probe: str | None = None) -> None:
        self.missing, self.probe, self.asked = missing, probe, 0

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        self.asked += 1
        ordered = sorted(eligible, key=lambda v: v.deployment != self.probe)
        return tuple(Ranked(v.deployment, 0.0, "seen", v.deployment == self.probe,
                            v.deployment not in self.missing) for v in ordered)


def test_alias_resolves_by_task_and_falls_back_to_the_default() -> None:
    """`auto` goes to the task's model, or to the default model for other tasks."""
    code = _decide("auto", "code")
    chat = _decide("auto", "chat")
    assert (code.model, code.pinned) == ("small", False)
    assert chat.model == "small" and chat.deployments == ("a", "b")


def test_model_name_is_pinned_and_unknown_names_are_404() -> None:
    """A configured model name is used as is; anything else is model_not_found."""
    assert _decide("small", "math").pinned
    with pytest.raises(NotFoundError) as caught:
        _decide("gpt-9", "chat")
    assert caught.value.code == "model_not_found"


@pytest.mark.parametrize(("missing", "probe", "order"), [
    (set(), None, ("a", "b")),
    ({"a"}, None, ("b", "a")),  # the replica that misses the SLO goes behind its peer
    ({"a", "b"}, None, ("a", "b")),  # none meets it: all as configured
    ({"a"}, "a", ("a", "b")),  # the ranker's probe of the replica left behind goes first
    (set(), "b", ("a", "b")),  # a probe of one meeting the SLO changes nothing
])
def test_a_pinned_models_replicas_meeting_the_slo_are_tried_first(
        missing: set[str], probe: str | None, order: tuple[str, ...]) -> None:
    decision = _decide("small", "chat", _Seen(missing, probe))
    assert decision.pinned and decision.deployments == order
    assert {r.deployment: r.meets_slo for r in decision.ranking_detail} == {
        "a": "a" not in missing, "b": "b" not in missing}


def test_bearer_key_maps_to_tenant_and_bad_keys_are_rejected() -> None:
    """The right key gives the tenant; a missing, malformed or wrong key is a 401."""
    assert authenticate("Bearer client-secret", RUNTIME.principals) == Principal(
        "acme", ("read", "write"))
    for header in (None, "client-secret", "Bearer ", "Bearer wrong"):
        with pytest.raises(AuthenticationError):
            authenticate(header, RUNTIME.principals)


def test_no_configured_keys_means_the_anonymous_tenant() -> None:
    """Without api_keys every caller is the default tenant (loopback-only service)."""
    assert authenticate(None, {}) is ANONYMOUS
