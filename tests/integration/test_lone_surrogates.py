"""An upstream whose JSON holds half an emoji (a lone UTF-16 surrogate escape, `\\ud83d`, as a
server that cuts text by UTF-16 code units sends): the answer reaches the `openai` client
whole and well-formed, through both adapters, streamed and not, instead of a 500 (litellm) or a
cut stream and a 502 (pass-through). A pair split across two stream chunks arrives as two
replacement characters; a pair whole inside one string arrives as its emoji. An upstream error
whose message holds half an emoji is the upstream's 400, not a 500.

Real processes on loopback: a hand-written upstream and the router (`pt-stub` pass-through,
`ll-stub` litellm, `tests/support/fake_upstream.stub_router_config`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.fake_upstream import QuietHandler, send_body, stub_gateway
from tests.support.services import Running

pytestmark = pytest.mark.integration

HEAD = '{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"stub",'
USAGE = '"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}'
# Whole: a lone high surrogate at the end (cut at a length limit) and a pair escaped whole.
WHOLE = (HEAD + '"choices":[{"index":0,"message":{"role":"assistant","content":'
         '"smile \\ud83d\\ude00 cut \\ud83d"},"finish_reason":"length"}],' + USAGE)
CHUNK = ('{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"stub",'
         '"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}')
# Streamed: the emoji's two halves in two chunks.
EVENTS = (CHUNK % ("hi \\ud83d", "null"), CHUNK % ("\\ude00 there", "null"),
          CHUNK % ("", '"stop"'))


REFUSAL = ('{"error": {"message": "bad input \\ud83d here", "type": "invalid_request_error", '
           '"param": null, "code": "bad_thing"}}')


class Handler(QuietHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if b"refuse me" in body:
            send_body(self, 400, REFUSAL.encode())
            return
        if b'"stream":true' not in body.replace(b" ", b""):
            send_body(self, 200, WHOLE.encode())
            return
        stream = b"".join(b"data: " + e.encode() + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"
        send_body(self, 200, stream, "text/event-stream")


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with stub_gateway(tmp_path_factory.mktemp("lone"), Handler) as running:
        yield running


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_a_whole_answer_with_half_an_emoji_arrives_well_formed(router: Running,
                                                               model: str) -> None:
    reply = _client(router).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], temperature=0.7)
    assert reply.choices[0].message.content == "smile \U0001f600 cut \ufffd"
    assert reply.usage is not None and reply.usage.completion_tokens == 4
    reply.choices[0].message.content.encode("utf-8")  # any UTF-8 writer takes it


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_a_stream_with_an_emoji_split_across_chunks_is_relayed_to_its_end(router: Running,
                                                                          model: str) -> None:
    chunks = list(_client(router).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], temperature=0.7,
        stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hi \ufffd\ufffd there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_a_cached_answer_with_half_an_emoji_replays_well_formed(router: Running,
                                                                tmp_path: Path) -> None:
    """temperature 0 is cached: the repaired answer is what is stored and replayed."""
    client = _client(router)
    first = client.chat.completions.with_raw_response.create(
        model="pt-stub", messages=[{"role": "user", "content": "cache me"}], temperature=0)
    second = client.chat.completions.with_raw_response.create(
        model="pt-stub", messages=[{"role": "user", "content": "cache me"}], temperature=0)
    assert second.headers["x-slorouter-cache"] == "hit"
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert second.parse().choices[0].message.content == "smile \U0001f600 cut \ufffd"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_an_upstream_refusal_with_half_an_emoji_is_its_400(router: Running, model: str,
                                                           stream: bool) -> None:
    """The upstream's 400 reaches the client as a 400 with its code and its message made
    well-formed, not a 500 `internal_error` (the router's own JSON writer refused the lone
    surrogate its error reader had kept)."""
    with pytest.raises(openai.BadRequestError) as caught:
        reply = _client(router).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "refuse me"}], stream=stream)
        if stream:
            list(reply)  # type: ignore[call-overload]
    assert caught.value.code == "bad_thing"
    assert "bad input \ufffd here" in caught.value.message
