"""A stream reaches its client from the model's first output, whatever kind: reasoning, a
refusal, text.

The router holds a stream's first events until it has content, so that it can still fail over;
only text and tool calls counted, so a reasoning model's `reasoning_content` (as vLLM and
DeepSeek stream it) waited for the answer's first words and then came in one burst, and a
refusal came after the whole stream. Here a scripted upstream sends the first output, then
waits until the client (the real `openai` SDK) has read it before it sends anything more: a
router that holds it back leaves the upstream waiting, and the test sees it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import openai
import pytest

from tests.integration.test_stream_edges import DONE, USAGE, chunk
from tests.support.fake_upstream import stub_gateway
from tests.support.services import Running

pytestmark = pytest.mark.integration

WAIT_S = 5.0  # how long the upstream waits for the client to read the first output
FIRST_OUTPUT: dict[str, dict[str, Any]] = {
    "reasoning_content": {"role": "assistant", "content": "", "reasoning_content": "Hmm, "},
    "reasoning": {"role": "assistant", "reasoning": "Let me think. "},
    "refusal": {"role": "assistant", "refusal": "I can't help with that."},
}
REST: dict[str, list[dict[str, Any]]] = {
    "reasoning_content": [{"reasoning_content": "two plus two."}, {"content": "4"}],
    "reasoning": [{"reasoning": "Two plus two."}, {"content": "4"}],
    "refusal": [{"refusal": " Ask me something else."}],
}


class FirstOutputUpstream(BaseHTTPRequestHandler):
    """Streams the first output its last message names, waits for `read` (or `WAIT_S`), then
    streams the rest; `waited_for_the_client` says whether the client read it first."""

    protocol_version = "HTTP/1.1"
    read: ClassVar[threading.Event] = threading.Event()
    waited_for_the_client: ClassVar[list[bool]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        kind = body["messages"][-1]["content"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._write(chunk([{"index": 0, "delta": FIRST_OUTPUT[kind], "finish_reason": None}]))
        self.waited_for_the_client.append(self.read.wait(WAIT_S))
        for fields in REST[kind]:
            self._write(chunk([{"index": 0, "delta": fields, "finish_reason": None}]))
        self._write(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        self._write(USAGE)
        self._write(DONE)
        self.wfile.write(b"0\r\n\r\n")

    def _write(self, piece: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.flush()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with stub_gateway(tmp_path_factory.mktemp("router"), FirstOutputUpstream) as running:
        yield running


# litellm drops a chunk whose delta holds only a refusal (docs/configuration.md): pass-through
CASES = [("pt-stub", "reasoning_content"), ("ll-stub", "reasoning_content"),
         ("pt-stub", "reasoning"), ("pt-stub", "refusal")]


@pytest.mark.parametrize(("model", "kind"), CASES)
def test_the_first_output_reaches_the_client_while_the_upstream_waits(
        gateway: Running, model: str, kind: str) -> None:
    FirstOutputUpstream.read.clear()
    FirstOutputUpstream.waited_for_the_client.clear()
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model=model, stream=True,
                                            messages=[{"role": "user", "content": kind}])
    received: list[dict[str, Any]] = []
    for event in stream:
        if event.choices:
            received.append(event.choices[0].delta.model_dump(exclude_none=True))
            FirstOutputUpstream.read.set()  # the first output is here: the upstream goes on
    assert FirstOutputUpstream.waited_for_the_client == [True]
    said = "".join(str(d.get(kind, "")) for d in received)  # SDK extras are dumped as fields
    assert said == "".join(str(f.get(kind, "")) for f in [FIRST_OUTPUT[kind], *REST[kind]])
