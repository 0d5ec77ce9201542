"""Deciding a route and authenticating a caller: pure functions over the runtime config."""

from __future__ import annotations

import pytest

from policies.loader import load_config_text
from router.auth import ANONYMOUS, authenticate
from router.classify.types import Labels
from router.decide import decide
from router.errors import AuthenticationError, NotFoundError
from router.runtime_config import Principal, resolve
from tests.unit.test_config import ENV, VALID, _prices

RUNTIME = resolve(load_config_text(VALID, environ=ENV), ENV, _prices)


def test_alias_resolves_by_task_and_falls_back_to_the_default() -> None:
    """`auto` goes to the task's model, or to the default model for other tasks."""
    code = decide("auto", Labels(task="code", risk="low"), RUNTIME)
    chat = decide("auto", Labels(task="chat", risk="low"), RUNTIME)
    assert (code.model, code.pinned) == ("small", False)
    assert chat.model == "small" and chat.deployments == ("a", "b")


def test_model_name_is_pinned_and_unknown_names_are_404() -> None:
    """A configured model name is used as is; anything else is model_not_found."""
    assert decide("small", Labels(task="math", risk="low"), RUNTIME).pinned
    with pytest.raises(NotFoundError) as caught:
        decide("gpt-9", Labels(task="chat", risk="low"), RUNTIME)
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
