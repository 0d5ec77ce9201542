"""Where an attempt's span says its call went: the host and port of the deployment's api_base,
and the provider by its semantic-conventions name."""

from __future__ import annotations

import pytest

from router.telemetry.attributes import provider_name, server_of


@pytest.mark.parametrize(("api_base", "server"), [
    ("http://127.0.0.1:8000/v1", ("127.0.0.1", 8000)),
    ("https://api.example.com/openai/v1?api-version=1", ("api.example.com", 443)),
    ("http://user:secret@vllm.internal/v1", ("vllm.internal", 80)),
    ("http://[::1]:9/v1", ("::1", 9)),
    (None, None),  # litellm's own endpoint for the provider
    ("", None),
    ("not a url", None),
    ("http://host:99999/v1", None),  # a port out of range
])
def test_server_of_an_api_base(api_base: str | None, server: tuple[str, int] | None) -> None:
    assert server_of(api_base) == server


@pytest.mark.parametrize(("prefix", "name"), [
    ("cohere_chat", "cohere"), ("azure_text", "azure.ai.openai"),
    ("anthropic_text", "anthropic"), ("codestral", "mistral_ai"),
    ("text-completion-codestral", "mistral_ai"), ("watsonx_text", "ibm.watsonx.ai"),
    ("vertex_ai_beta", "gcp.vertex_ai"), ("openai", "openai"), ("moonshot", "moonshot_ai"),
    ("hosted_vllm", "hosted_vllm"),  # no well-known name: litellm's own
])
def test_a_litellm_prefix_is_named_by_its_well_known_provider(prefix: str, name: str) -> None:
    """Each of litellm's routes to a provider (its text-completion and beta APIs too) is that
    provider's well-known `gen_ai.provider.name`: `cohere_chat` and six others were names of
    their own in spans and metric labels (the telemetry audit of 2026-12-07)."""
    assert provider_name(prefix) == name
