"""Where an attempt's span says its call went: the host and port of the deployment's api_base."""

from __future__ import annotations

import pytest

from router.telemetry.attributes import server_of


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
