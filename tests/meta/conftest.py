"""Real litellm exception objects, built the way litellm builds them."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture
def litellm_errors() -> list[BaseException]:
    from router.providers import litellm_adapter  # noqa: F401, I001 - sets litellm's offline env
    import litellm

    request = httpx.Request("POST", "http://upstream/v1/chat/completions")
    response = httpx.Response(429, request=request, headers={"retry-after": "2"})
    return [
        litellm.RateLimitError("slow down", llm_provider="openai", model="m", response=response),
        litellm.Timeout("too slow", model="m", llm_provider="openai"),
        litellm.ServiceUnavailableError("down", llm_provider="openai", model="m"),
        litellm.ContextWindowExceededError("too long", model="m", llm_provider="openai"),
        litellm.BadRequestError("bad", model="m", llm_provider="openai"),
        litellm.InternalServerError("boom", llm_provider="openai", model="m"),
        litellm.APIConnectionError("no route", llm_provider="openai", model="m"),
    ]
