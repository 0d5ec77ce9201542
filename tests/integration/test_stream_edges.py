"""Streams at their edges, through both adapters, on real processes: `n > 1` answers, the SSE
framings upstreams use (CRLF, a lone CR, comments, `event:` lines, a line split across writes,
data over several lines), upstreams
that cut a stream, and long answers whose chunks repeat.

One scripted upstream on a loopback port answers each request with the script its last message
names: SSE bytes sent as separate chunked writes (so a line can be split between two), ending
with or without `[DONE]`. The router reaches it through both adapters (`pt-stub`
pass-through, `ll-stub` litellm: `stub_router_config`); its breakers never open and nothing is
retried, so each case meets the upstream once.
The client is the real `openai` SDK.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import stub_gateway
from tests.support.services import Running

pytestmark = pytest.mark.integration


def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-edge", "object": "chat.completion.chunk",
                            "created": 1, "model": "stub", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def delta(index: int, content: str | None = None, finish: str | None = None,
          role: bool = False) -> dict[str, Any]:
    fields: dict[str, Any] = {"role": "assistant"} if role else {}
    if content is not None:
        fields["content"] = content
    return {"index": index, "delta": fields, "finish_reason": finish}


USAGE = chunk([], {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9})
REFUSAL = (b'data: {"error": {"message": "messages[0].content: too many images", "type": '
           b'"invalid_request_error", "param": "messages", "code": "invalid_value"}}\n\n')
DONE = b"data: [DONE]\n\n"
# Two choices interleaved, as OpenAI streams `n: 2`: role chunks, content, a finish reason each.
TWO_CHOICES = [chunk([delta(0, "", role=True)]), chunk([delta(1, "", role=True)]),
               chunk([delta(0, "A0")]), chunk([delta(1, "B0")]), chunk([delta(1, "B1")]),
               chunk([delta(0, "A1")]), chunk([delta(1, finish="length")]),
               chunk([delta(0, finish="stop")]), USAGE, DONE]


def _split(pieces: list[bytes]) -> list[bytes]:
    """Every event written in three pieces: `data: {…` cut inside its field name and its JSON."""
    return [part for piece in pieces for part in (piece[:3], piece[3:17], piece[17:])]


SCRIPTS: dict[str, list[bytes]] = {
    "two-choices": TWO_CHOICES,
    # the connection ends (a clean chunked end) after choice 1's finish, before choice 0's
    "two-choices-cut": TWO_CHOICES[:7],
    "crlf": [piece.replace(b"\n", b"\r\n") for piece in TWO_CHOICES],
    "cr": [piece.replace(b"\n", b"\r") for piece in TWO_CHOICES],  # SSE allows a lone CR too
    "comments-and-fields": [b": ping\n\n", b"event: message\n" + TWO_CHOICES[0],
                            b": keep-alive\n\n", b"id: 3\nretry: 1000\n" + TWO_CHOICES[1],
                            *TWO_CHOICES[2:]],
    "split-writes": _split(TWO_CHOICES),
    # each event's JSON over several `data:` lines, which SSE joins
    "multi-line-data": [piece.replace(b", ", b",\ndata: ") for piece in TWO_CHOICES],
    # an error event in the shape of OpenAI's Responses API (no `error` field), then the
    # connection held open a while
    "error-event": [chunk([delta(0, "A")]),
                    b'event: error\ndata: {"type": "error", "code": "server_error", '
                    b'"message": "the model is overloaded"}\n\n', b": ping\n\n", b"HOLD"],
    # the upstream refusing the request in its stream's first event, then after content
    "refused-first": [REFUSAL, b": ping\n\n", b"HOLD"],
    "refused-after-content": [chunk([delta(0, "A")]), REFUSAL],
    # 300 chunks of the same text: a dashed rule, a run of zeros, a repeated table row
    "repeated": [*(chunk([delta(0, "----")]) for _ in range(300)),
                 chunk([delta(0, finish="stop")]), USAGE, DONE],
}


class ScriptedUpstream(BaseHTTPRequestHandler):
    """Answers each POST with `SCRIPTS[<its last message>]`, each piece a chunked write."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        pieces = SCRIPTS[body["messages"][-1]["content"]]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for piece in pieces:
            if piece == b"HOLD":
                time.sleep(3)
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(0.001)  # its own TCP segment: a split line arrives in parts
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with stub_gateway(tmp_path_factory.mktemp("router"), ScriptedUpstream) as running:
        yield running


@pytest.fixture(scope="module")
def client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)


def _read(client: openai.OpenAI, model: str, script: str, **extra: Any
          ) -> tuple[dict[int, str], dict[int, str | None]]:
    """Stream `script` through `model`: each choice's text and its finish reason."""
    texts: dict[int, str] = {}
    reasons: dict[int, str | None] = {}
    stream = client.chat.completions.create(
        model=model, stream=True, temperature=0.5,
        messages=[{"role": "user", "content": script}], **extra)
    for event in stream:
        for choice in event.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            reasons.setdefault(choice.index, None)
            if choice.finish_reason is not None:
                reasons[choice.index] = choice.finish_reason
    return texts, reasons


@pytest.mark.parametrize("script", ["two-choices", "crlf", "cr", "comments-and-fields",
                                    "split-writes", "multi-line-data"])
def test_two_interleaved_choices_reach_the_client_whole_in_any_sse_framing(
        client: openai.OpenAI, script: str) -> None:
    """Pass-through relays each choice's text and its own finish reason, whatever framing the
    upstream used. (Through litellm, `n > 1` streams lose choice 1's finish reason and give
    choice 0 the last one received: litellm's stream wrapper keeps one finish reason per
    stream, so the litellm adapter is not tested with them here.)"""
    texts, reasons = _read(client, "pt-stub", script, n=2)
    assert texts == {0: "A0A1", 1: "B0B1"}
    assert reasons == {0: "stop", 1: "length"}


@pytest.mark.parametrize("script", ["crlf", "cr", "comments-and-fields", "split-writes",
                                    "multi-line-data"])
def test_sse_framings_reach_the_client_through_litellm(client: openai.OpenAI,
                                                       script: str) -> None:
    texts, _ = _read(client, "ll-stub", script, n=2)
    assert texts == {0: "A0A1", 1: "B0B1"}


def test_a_stream_that_ends_before_every_choice_finished_is_an_upstream_error(
        client: openai.OpenAI) -> None:
    """The upstream closed its stream (no `[DONE]`) once choice 1 had its finish reason, while
    choice 0 was still being written: the client gets the stream-cut error event, not a clean
    end that passes choice 0's half answer off as whole."""
    with pytest.raises(openai.APIError) as caught:
        _read(client, "pt-stub", "two-choices-cut", n=2)
    assert isinstance(caught.value.body, dict), caught.value
    assert caught.value.body.get("code") == "upstream_stream_cut", caught.value.body


def test_an_error_event_of_any_shape_ends_the_stream_at_once_with_its_message(
        gateway: Running) -> None:
    """An `event: error` whose data has no `error` field (OpenAI's Responses API shape) is the
    upstream's error: the client gets the stream-cut error event with the upstream's message as
    soon as it comes, not the error object relayed as if it were a chunk and then a wait for the
    upstream to close. (litellm relays it as an empty chunk and waits: pass-through only.)"""
    started = time.monotonic()
    with httpx.Client(base_url=gateway.base_url, timeout=20) as http:
        response = http.post("/v1/chat/completions", json={
            "model": "pt-stub", "stream": True,
            "messages": [{"role": "user", "content": "error-event"}]})
    elapsed = time.monotonic() - started
    events = [json.loads(line[len("data: "):]) for line in response.text.split("\n")
              if line.startswith("data: ")]
    assert [event.get("object") for event in events[:-1]] == ["chat.completion.chunk"]
    error = events[-1]["error"]
    assert error["code"] == "upstream_stream_cut" and "overloaded" in error["message"], error
    assert elapsed < 2.5, elapsed  # not held until the upstream let go


def test_a_refusal_in_a_streams_first_event_is_the_400_it_would_have_been(
        client: openai.OpenAI) -> None:
    """An upstream that answers 200 and refuses the request in its first event (OpenAI's
    `invalid_request_error`) refused it as a 400 would: the client gets that 400 with the
    upstream's message, not a 502 `upstream_stream_cut`, which the router and then the
    client's SDK retried (six upstream calls for one refusal, the JavaScript SDK audit) and
    which counted against the deployment's health. After content the same event is a cut
    stream, as any error after the answer began. (Pass-through: litellm reads such events its
    own way.)"""
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as refused:
        _read(client, "pt-stub", "refused-first")
    assert "too many images" in refused.value.message, refused.value.body
    assert time.monotonic() - started < 2.5  # at once, not when the upstream let go
    with pytest.raises(openai.APIError) as cut:
        _read(client, "pt-stub", "refused-after-content")
    assert isinstance(cut.value.body, dict)
    assert cut.value.body.get("code") == "upstream_stream_cut", cut.value.body


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_a_long_run_of_identical_chunks_is_relayed_whole_through_either_adapter(
        client: openai.OpenAI, model: str) -> None:
    """A model may write the same piece of text many times in a row (a long dashed rule): the
    answer is relayed whole, as pass-through does; litellm's own loop guard cut it after 100
    such chunks as an `upstream_bad_response` (the router's deadline bounds a runaway stream)."""
    texts, reasons = _read(client, model, "repeated")
    assert texts == {0: "----" * 300}
    assert reasons == {0: "stop"}
