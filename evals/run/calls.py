"""One eval call: a chat request to one deployment through the project's own providers.

`Callers` holds one provider per adapter (the pass-through and the litellm adapter, exactly as
the service wires them) and sends a non-streaming request with a per-call timeout, enforced by
the provider and again by `asyncio.wait_for` (a hung upstream cannot stall the run). Failures
come back as a `CallResult` with an error kind (`timeout` from either guard, else the project's
error class name, or `no_content`), never as an exception: the runner counts them as failed items.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from router.errors import ProviderTimeoutError, SlorouterError
from router.providers.base import AdapterName, Deployment, Provider, UpstreamCall

_GRACE_S = 1.0  # the provider's own timeout fires first; wait_for is the backstop


@dataclass(frozen=True, slots=True)
class CallResult:
    """The answer text of one call, or why there is none."""

    deployment: str
    text: str | None
    error: str | None
    detail: str
    seconds: float


def answer_text(body: bytes) -> str | None:
    """The first choice's message content of a chat.completion body, if it has text."""
    parsed = orjson.loads(body)
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not choices:
        return None
    message = choices[0].get("message") or {}
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


class Callers:
    """The providers by adapter; `close()` releases their connection pools."""

    def __init__(self, providers: Mapping[AdapterName, Provider]) -> None:
        self._providers = providers

    @staticmethod
    def create() -> Callers:
        from router.providers.litellm_adapter import LitellmProvider
        from router.providers.passthrough import PassthroughProvider

        return Callers({"openai_passthrough": PassthroughProvider(), "litellm": LitellmProvider()})

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()

    async def call(self, deployment: Deployment, messages: Sequence[Mapping[str, str]],
                   request: Mapping[str, Any], timeout_s: float) -> CallResult:
        """Send one chat request; any failure becomes the result's error kind."""
        body = {**request, "messages": [dict(m) for m in messages]}
        start = time.perf_counter()
        error, detail, text = None, "", None
        try:
            completion = await asyncio.wait_for(
                self._providers[deployment.adapter].complete(
                    UpstreamCall(deployment=deployment, body=body, timeout_s=timeout_s)),
                timeout=timeout_s + _GRACE_S)
            text = answer_text(completion.body)
            if text is None:
                error, detail = "no_content", "the completion has no text content"
        except TimeoutError:
            error, detail = "timeout", f"no answer within {timeout_s:g} s"
        except ProviderTimeoutError:
            error, detail = "timeout", f"no answer within {timeout_s:g} s"
        except SlorouterError as exc:
            error, detail = type(exc).__name__, exc.message[:200]
        except (orjson.JSONDecodeError, AttributeError) as exc:
            error, detail = "bad_body", str(exc)[:200]
        return CallResult(deployment.name, text, error, detail, time.perf_counter() - start)
