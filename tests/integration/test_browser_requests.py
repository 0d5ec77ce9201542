"""A router without API keys is not driven by web pages (`router.api.browser_guard`).

An audit sent, from "a page" (`Origin: http://evil.example`, a text/plain body: a CORS simple
request, no preflight), a completion to a keyless router on loopback: 200, and a real upstream
call on the operator's keys; with `Host: evil.example` (DNS rebinding) the page could read the
answer too. Now both are a 403 in OpenAI's shape before anything runs; local programs, which
send neither header, are served as before, and a router with keys leaves it to the key.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.services import Running, start_fast_and_broken, start_router

pytestmark = pytest.mark.integration

KEY = "sk-test-browser-0123456789"


def _config(sim: Running, keyed: bool) -> str:
    keys = "api_keys: [{key: env:KEY, tenant: t}]\n" if keyed else ""
    return f"""version: 1
deployments:
  - {{name: fast, model: openai/fast, adapter: openai_passthrough,
     api_base: '{sim.base_url}/v1', input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: fast, deployments: [fast]}}]
routes: {{default_model: fast}}
{keys}"""


@pytest.fixture(scope="module")
def routers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory = tmp_path_factory.mktemp("browser")
    sim = start_fast_and_broken(directory)
    keyless = start_router(directory, _config(sim, False), name="keyless")
    keyed = start_router(directory, _config(sim, True), env={"KEY": KEY}, name="keyed")
    yield keyless, keyed
    keyed.stop()
    keyless.stop()
    sim.stop()


BODY = '{"model": "fast", "messages": [{"role": "user", "content": "Hi"}]}'


@pytest.mark.parametrize("headers", [
    {"origin": "http://evil.example", "content-type": "text/plain"},
    {"origin": "null"},
    {"host": "evil.example"},
], ids=["cross-origin", "opaque-origin", "rebound-host"])
def test_a_keyless_router_refuses_a_page_s_request(routers: tuple[Running, Running],
                                                   headers: dict[str, str]) -> None:
    keyless, _ = routers
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                         ("POST", "/v1/route/explain")):
        response = httpx.request(method, keyless.base_url + path, headers=headers,
                                 content=BODY if method == "POST" else None, timeout=10)
        assert response.status_code == 403, (path, response.text)
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("permission_error", "browser_request_refused")
        assert response.headers["x-request-id"]


def test_local_programs_are_served_and_keys_decide_with_keys(
        routers: tuple[Running, Running]) -> None:
    keyless, keyed = routers
    for host in (None, "localhost:1234", "127.0.0.1"):
        headers = {"content-type": "application/json"} | ({"host": host} if host else {})
        answered = httpx.post(keyless.base_url + "/v1/chat/completions", headers=headers,
                              content=BODY, timeout=10)
        assert answered.status_code == 200, answered.text
    page = {"origin": "http://app.example", "authorization": f"Bearer {KEY}",
            "host": "api.example"}
    answered = httpx.post(keyed.base_url + "/v1/chat/completions", headers=page, content=BODY,
                          timeout=10)
    assert answered.status_code == 200, answered.text
