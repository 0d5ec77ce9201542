"""An upstream that answers 200 with an HTML page (a misconfigured proxy, a captive portal),
streamed or whole, through either adapter: the attempt fails with `upstream_bad_response`, its
breaker counts a failure, and a route with a second deployment fails over to it, so the `openai`
client gets a proper answer. Streamed, through litellm, such a page used to end as an empty
stream counted as served (litellm reads a body without events as a stream that just ended).

Real processes on loopback: a hand-written upstream that answers every request with HTML, the
provider simulator as the good deployment, and the router (`pt-*` pass-through, `ll-*` litellm;
prefix affinity off, so a route's deployments are tried in their configured order; no retry on
the same deployment, so each request reaches the HTML upstream once).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-html-answers"
CHAT = {"x-slorouter-task": "chat"}  # a chat, not an action: a failed read may go elsewhere
PAGE = b"<!doctype html><html><body><h1>Sign in to the network</h1></body></html>"


class HtmlUpstream(ThreadedUpstream):
    """Answers every POST 200 `text/html` with a sign-in page, and counts them."""

    def __init__(self) -> None:
        self.calls = 0
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.calls += 1
                send_body(self, 200, PAGE, "text/html; charset=utf-8")

        super().__init__(Handler)


def _deployment(name: str, adapter: str, api_base: str) -> str:
    return (f"\n  - name: {name}\n    model: openai/fast\n    adapter: {adapter}\n"
            f"    api_base: {api_base}/v1\n    api_key: env:UPSTREAM_KEY\n"
            "    input_price_per_mtok: 1.0\n    output_price_per_mtok: 2.0\n    timeout_s: 5")


def router_config(html: str, sim: str) -> str:
    # A pair per case: a replica seen failing goes behind its peer for the requests after, so
    # each case starts on an HTML-answering replica nothing has seen fail yet.
    routes = {"pt-html": ["pt-html"], "ll-html": ["ll-html"],
              **{f"{adapter}-html-then-good{case}": [f"{adapter}-html-first{case}",
                                                     f"{adapter}-good-second"]
                 for adapter in ("pt", "ll") for case in ("", "-streamed")}}
    deployments = [("pt-html", "openai_passthrough", html), ("ll-html", "litellm", html),
                   *((f"{adapter}-html-first{case}", kind, html)
                     for adapter, kind in (("pt", "openai_passthrough"), ("ll", "litellm"))
                     for case in ("", "-streamed")),
                   ("pt-good-second", "openai_passthrough", sim),
                   ("ll-good-second", "litellm", sim)]
    models = "".join(f"\n  - name: {name}\n    deployments: [{', '.join(order)}]"
                     for name, order in routes.items())
    return f"""version: 1
deployments:{''.join(_deployment(*d) for d in deployments)}
models:{models}
routes:
  default_model: pt-html-then-good
api_keys:
  - key: env:TENANT_KEY
    tenant: tenant-one
    scopes: [read]
server:
  request_timeout_s: 20
  cache:
    prefix_affinity: false
  reliability:
    max_retries_per_deployment: 0
"""


@pytest.fixture(scope="module")
def html() -> Iterator[HtmlUpstream]:
    upstream = HtmlUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gateway(html: HtmlUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("html-answers")
    sim = start_simulator(directory, {"fast": FAST_PROFILE})
    try:
        router = start_router(directory, router_config(html.base_url, sim.base_url),
                              env={"TENANT_KEY": API_KEY, "UPSTREAM_KEY": "upstream-key"})
        yield router
        router.stop()
    finally:
        sim.stop()


@pytest.fixture
def client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


def _failures(gateway: Running, deployment: str) -> int:
    body = httpx.get(f"{gateway.base_url}/v1/health/deployments", timeout=10).json()
    found = {d["deployment"]: d for d in body["deployments"]}
    return int(found.get(deployment, {}).get("window_failures", 0))


def _ask(client: openai.OpenAI, model: str, stream: bool, prompt: str) -> tuple[str, str]:
    """(the answer's text, the deployment that served it: `x-slorouter-model`)."""
    messages: Any = [{"role": "user", "content": prompt}]
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, stream=stream, extra_headers=CHAT)
    served = raw.headers.get("x-slorouter-model", "")
    if not stream:
        return raw.parse().choices[0].message.content or "", served
    text = "".join(chunk.choices[0].delta.content or ""
                   for chunk in raw.parse() if chunk.choices)  # type: ignore[union-attr]
    return text, served


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("model", ["pt-html", "ll-html"])
def test_an_html_200_is_a_bad_response_counted_by_the_breaker(
        client: openai.OpenAI, gateway: Running, html: HtmlUpstream, model: str,
        stream: bool) -> None:
    """The only deployment answers an HTML page: the client gets a 502 `upstream_bad_response`
    (never an empty answer), and the deployment's breaker records one failure."""
    before, calls = _failures(gateway, model), html.calls
    with pytest.raises(openai.InternalServerError) as caught:
        _ask(client, model, stream, f"a page for {model}, streamed={stream}")
    assert caught.value.status_code == 502
    error = caught.value.response.json()["error"]
    assert error["code"] == "upstream_bad_response", error
    assert html.calls == calls + 1
    assert _failures(gateway, model) == before + 1


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("adapter", ["pt", "ll"])
def test_an_html_200_fails_over_to_the_next_deployment(
        client: openai.OpenAI, gateway: Running, html: HtmlUpstream, adapter: str,
        stream: bool) -> None:
    """The first deployment answers an HTML page, the second is healthy: the client gets the
    second one's answer, and the first one's breaker counts the page as a failure."""
    case = "-streamed" if stream else ""
    first = f"{adapter}-html-first{case}"
    before, calls = _failures(gateway, first), html.calls
    text, served = _ask(client, f"{adapter}-html-then-good{case}", stream,
                        f"fail over from a page via {adapter}, streamed={stream}")
    assert served == f"{adapter}-good-second"
    assert text.strip() and "<html" not in text, text
    assert html.calls == calls + 1
    assert _failures(gateway, first) == before + 1
