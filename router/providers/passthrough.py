"""Fast pass-through adapter for OpenAI-compatible upstreams (vLLM, SGLang, OpenAI, ...).

One pooled aiohttp session for all deployments. Non-streaming bodies go back to the client as
the exact bytes the upstream sent; streamed chunks are forwarded as the upstream's own JSON
payloads, parsed once only to see whether they carry content or usage.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from router.providers.base import Completion, StreamEvent, UpstreamCall, Usage, chunk_event
from router.providers.errors import from_status, map_exception, parse_retry_after

_DATA = b"data:"


class PassthroughProvider:
    """`Provider` over plain HTTP to `{api_base}/chat/completions`."""

    def __init__(self, max_connections: int = 1000) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=300,
                                             enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def _request(call: UpstreamCall, stream: bool) -> tuple[str, bytes, dict[str, str]]:
        deployment = call.deployment
        body: dict[str, Any] = dict(call.body)
        body["model"] = deployment.upstream_model
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        headers = {"content-type": "application/json", **call.headers}
        if deployment.api_key:
            headers["authorization"] = f"Bearer {deployment.api_key}"
        base = deployment.api_base if deployment.api_base else "https://api.openai.com/v1"
        return f"{base}/chat/completions", orjson.dumps(body), headers

    @staticmethod
    def _timeout(call: UpstreamCall) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=call.timeout_s,
                                     sock_connect=call.deployment.connect_timeout_s)

    async def complete(self, call: UpstreamCall) -> Completion:
        url, data, headers = self._request(call, stream=False)
        try:
            async with self._client().post(url, data=data, headers=headers,
                                           timeout=self._timeout(call)) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise _status_error(response.status, raw, response.headers)
        except Exception as exc:
            raise map_exception(exc) from exc
        return Completion(body=raw, usage=_usage_of(raw))

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        url, data, headers = self._request(call, stream=True)
        try:
            async with self._client().post(url, data=data, headers=headers,
                                           timeout=self._timeout(call)) as response:
                if response.status >= 400:
                    raise _status_error(response.status, await response.read(), response.headers)
                async for event in _sse_events(response.content):
                    yield event
        except Exception as exc:
            raise map_exception(exc) from exc


async def _sse_events(content: aiohttp.StreamReader) -> AsyncIterator[StreamEvent]:
    """Upstream SSE lines → events; a stream that ends before `[DONE]` is an error."""
    async for line in content:
        if not line.startswith(_DATA):
            continue
        payload = line[len(_DATA):].strip()
        if payload == b"[DONE]":
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise aiohttp.ClientPayloadError("malformed chunk from upstream") from exc
        if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
            raise from_status(502, str(chunk["error"])[:300])
        yield chunk_event(payload, chunk)
    raise aiohttp.ClientPayloadError("upstream stream ended before [DONE]")


def _status_error(status: int, raw: bytes, headers: Mapping[str, str]) -> Exception:
    message = raw[:300].decode("utf-8", "replace")
    try:
        parsed = orjson.loads(raw)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            message = str(parsed["error"].get("message", message))
    except orjson.JSONDecodeError:
        pass
    return from_status(status, message, parse_retry_after(headers.get("retry-after")))


def _usage_of(raw: bytes) -> Usage | None:
    """The usage of a chat.completion body; a body that is not one is an upstream error."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
        raise from_status(502, "upstream sent a body that is not a chat.completion")
    return Usage.from_openai(parsed.get("usage"))
