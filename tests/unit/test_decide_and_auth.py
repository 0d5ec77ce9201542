"""Deciding a route and authenticating a caller: pure functions over the runtime config."""

from __future__ import annotations

import pytest

from policies.eligibility import RequestFacts
from policies.loader import load_config_text
from router.auth import ANONYMOUS, authenticate
from router.classify.types import Labels
from router.decide import StaticRanker, decide
from router.errors import AuthenticationError, NotFoundError
from router.runtime_config import Principal, resolve
from tests.unit.test_config import ENV, VALID, _prices

RUNTIME = resolve(load_config_text(VALID, environ=ENV), ENV, _prices)


def _decide(requested: str, task: str) -> object:
    labels = Labels(task=task, risk="low")  # type: ignore[arg-type]
    facts = RequestFacts(task=labels.task, risk="low", prompt_tokens=10, max_output_tokens=10)
    return decide(requested, labels, facts, RUNTIME, StaticRanker(), lambda _: True)


def test_alias_resolves_by_task_and_falls_back_to_the_default() -> None:
    """`auto` goes to the task's model, or to the default model for other tasks."""
    code = _decide("auto", "code")
    chat = _decide("auto", "chat")
    assert (code.model, code.pinned) == ("small", False)  # type: ignore[attr-defined]
    assert chat.model == "small" and chat.deployments == ("a", "b")  # type: ignore[attr-defined]


def test_model_name_is_pinned_and_unknown_names_are_404() -> None:
    """A configured model name is used as is; anything else is model_not_found."""
    assert _decide("small", "math").pinned  # type: ignore[attr-defined]
    with pytest.raises(NotFoundError) as caught:
        _decide("gpt-9", "chat")
    assert caught.value.code == "model_not_found"


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
