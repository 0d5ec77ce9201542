"""Deciding a route and authenticating a caller: pure functions over the runtime config."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.eligibility import RequestFacts, Verdict
from policies.loader import load_config_text
from policies.schema import TaskPolicy
from router.auth import ANONYMOUS, authenticate, holds_key, presented_credentials
from router.classify.types import Labels
from router.decide import Decision, Ranked, Ranker, StaticRanker, decide
from router.errors import AuthenticationError, NotFoundError
from router.runtime_config import Principal, key_digest, resolve
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


def test_a_key_is_found_in_a_clients_string_by_the_credential_presented_or_by_its_digest(
        ) -> None:
    """A string a client chose (its request id, its tracestate) holds a key when the request's
    own credential is anywhere in it, or when it or one of its token-like parts is a configured
    key, known by its SHA-256 only (a `key_sha256` key: no redaction list holds it)."""
    key = "tenant2-Zx9Qm4Lp7Rt2Wv8Yb3Nc"
    assert presented_credentials(["Bearer " + key, "bare-credential", "", "Bearer"]) == (
        key, "bare-credential", "Bearer")
    assert holds_key(f"retry-of-{key}-2", presented=(key,), digests=())
    digests = {key_digest(key)}
    for pasted in (key, f"Bearer {key}", f"acme={key}", f'"{key}"', f"id {key}; 2"):
        assert holds_key(pasted, presented=(), digests=digests), pasted
    for clean in ("4bf92f35-77b3-4da6-a3ce-929d0e0e4736", "rojo=00f067aa0ba902b7", key[:-1]):
        assert not holds_key(clean, presented=(key,), digests=digests), clean
    # a credential shorter than 6 characters is not looked for: it would match common words
    assert not holds_key("unused-request", presented=("unus",), digests=())
