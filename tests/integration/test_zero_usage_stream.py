"""A client that did not ask for usage gets no usage chunk, even one reporting no tokens.

The router asks every upstream stream for its usage (to price it) and drops the final
`choices: []` chunk for a client that did not ask (`stream_options.include_usage`). An
upstream whose usage reported no tokens at all reached such clients (the chunk was recognised
by its usage as parsed, which reads no tokens as no report), and a client indexing
`chunk.choices[0]` failed on it (the API audit of 2026-12-07).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import openai
import orjson
import pytest

from tests.support.fake_upstream import QuietHandler, stub_gateway
from tests.support.services import Running

pytestmark = pytest.mark.integration

NO_TOKENS = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def _chunk(model: str, choices: list[object], **more: object) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": choices, **more}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class NoTokensStream(QuietHandler):
    """Streams a short answer whose final usage chunk reports no tokens."""

    def do_POST(self) -> None:
        model = orjson.loads(self.rfile.read(int(self.headers["content-length"])))["model"]
        body = b"".join([
            _chunk(model, [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]),
            _chunk(model, [{"index": 0, "delta": {"content": " there"}}]),
            _chunk(model, [{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            _chunk(model, [], usage=NO_TOKENS),
            b"data: [DONE]\n\n",
        ])
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory: Path = tmp_path_factory.mktemp("zero-usage-stream")
    with stub_gateway(directory, NoTokensStream) as running:
        yield running


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_no_usage_chunk_reaches_a_client_that_did_not_ask(gateway: Running, model: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(
        model=model, stream=True, messages=[{"role": "user", "content": "Say hi."}]))
    client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi there"
    assert all(c.choices for c in chunks), [c.model_dump() for c in chunks if not c.choices]
    assert all(c.usage is None for c in chunks)
