"""Failures as a client sees them: auth, bad input, upstream errors, disconnects, cut streams."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.conftest import API_KEY, router_config
from tests.support.services import Running, finished_requests, start_router

MESSAGES = [{"role": "user", "content": "hello there"}]


def _post(gateway: Running, body: bytes | str, key: str | None = "sk-test-tenant-one",
          headers: dict[str, str] | None = None) -> httpx.Response:
    all_headers = {"content-type": "application/json", **(headers or {})}
    if key is not None:
        all_headers["authorization"] = f"Bearer {key}"
    return httpx.post(f"{gateway.base_url}/v1/chat/completions", content=body,
                      headers=all_headers, timeout=20)


def _assert_openai_error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    return dict(error)


def _sim_stats(sim: Running, model: str) -> dict[str, object]:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=5).json()
    models = stats.get("models", stats)
    return dict(models.get(model, {}))


def test_missing_key_is_401(gateway: Running) -> None:
    """No Authorization header → 401 in OpenAI's error shape."""
    error = _assert_openai_error(_post(gateway, '{"model":"pt-fast","messages":[]}', key=None),
                                 401)
    assert error["type"] == "authentication_error"


def test_wrong_key_is_401_for_the_sdk(gateway: Running) -> None:
    """The SDK raises AuthenticationError for an unknown key."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="pt-fast", messages=MESSAGES)


def test_malformed_json_is_400(gateway: Running) -> None:
    """A body that is not JSON → 400 invalid_request_error naming the problem."""
    error = _assert_openai_error(_post(gateway, b'{"model": "pt-fast", "messages": ['), 400)
    assert error["code"] == "invalid_json"


def test_a_body_that_is_not_utf8_is_400_saying_so(gateway: Running) -> None:
    body = '{"model": "pt-fast", "messages": [{"role": "user", "content": "café"}]}'
    error = _assert_openai_error(_post(gateway, body.encode("latin-1")), 400)
    assert error["code"] == "invalid_json" and "not UTF-8" in str(error["message"])
    # the position named is the first byte that is not UTF-8 (the é), not orjson's 0
    assert str(error["message"]).endswith(f"at position {body.index('é')}")


def test_a_header_in_utf8_reads_as_the_same_text_in_metadata(gateway: Running) -> None:
    """A Persian session id sent as UTF-8 in `x-slorouter-session` and in `metadata.session_id`
    is one session, not a conflict between its Latin-1 reading and the text."""
    session = "جلسه-۱"
    body = json.dumps({"model": "pt-fast", "messages": MESSAGES,
                       "metadata": {"session_id": session}})
    response = httpx.post(f"{gateway.base_url}/v1/chat/completions", content=body,
                          headers=[(b"content-type", b"application/json"),
                                   (b"authorization", b"Bearer sk-test-tenant-one"),
                                   (b"x-slorouter-session", session.encode())],
                          timeout=20)
    assert response.status_code == 200, response.text
    other = json.dumps({"model": "pt-fast", "messages": MESSAGES,
                        "metadata": {"session_id": "جلسه-۲"}})
    refused = httpx.post(f"{gateway.base_url}/v1/chat/completions", content=other,
                         headers=[(b"content-type", b"application/json"),
                                  (b"authorization", b"Bearer sk-test-tenant-one"),
                                  (b"x-slorouter-session", session.encode())],
                         timeout=20)
    error = _assert_openai_error(refused, 400)
    assert error["code"] == "conflicting_session"
    assert session in str(error["message"])  # named as the client wrote it


@pytest.mark.parametrize("encoding", ["gzip", "br", "GZip"])
def test_a_compressed_body_is_415_not_a_parse_error(gateway: Running, encoding: str) -> None:
    body = gzip.compress(b'{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}]}')
    error = _assert_openai_error(_post(gateway, body, headers={"content-encoding": encoding}),
                                 415)
    assert error["code"] == "unsupported_content_encoding"
    plain = _post(gateway, gzip.decompress(body), headers={"content-encoding": "identity"})
    assert plain.status_code == 200, plain.text


@pytest.mark.parametrize(("body", "param"), [
    ('{"model": "pt-fast", "messages": "hello"}', "messages"),
    ('{"model": "pt-fast", "messages": []}', "messages"),
    ('{"model": 7, "messages": [{"role": "user", "content": "x"}]}', "model"),
    ('{"model": "pt-fast", "messages": [{"role": "wizard", "content": "x"}]}', "messages[0].role"),
    ('{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}], "temperature": 9}',
     "temperature"),
    ('{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}',
     "max_tokens"),
    ('[1, 2, 3]', None),
    # OpenAI's bounds on `metadata`: 16 pairs, keys of 64 characters, values of 512.
    ('{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}], "metadata": {'
     + ", ".join(f'"k{i}": "v"' for i in range(17)) + "}}", "metadata"),
    ('{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}], "metadata": {"'
     + "k" * 65 + '": "v"}}', "metadata"),
    ('{"model": "pt-fast", "messages": [{"role": "user", "content": "x"}], "metadata": '
     '{"k": "' + "v" * 513 + '"}}', "metadata.k"),
])
def test_wrong_types_and_empty_messages_are_400_with_the_param(
        gateway: Running, body: str, param: str | None) -> None:
    """Each invalid field is reported with its path in `param`."""
    error = _assert_openai_error(_post(gateway, body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


@pytest.mark.parametrize(("body", "param", "why"), [
    ({"model": "pt-fast"}, "messages", ""),
    ({"model": "pt-fast", "messages": [{"content": "x"}]}, "messages[0].role", ""),
    ({"model": "pt-fast", "messages": MESSAGES,
      "tools": [{"type": "function", "function": {"parameters": {}}}]},
     "tools[0].function.name", ""),
    ({"model": "pt-fast", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text", " (required by the `text` content part)"),
])
def test_a_missing_field_is_named_as_openai_names_it(gateway: Running, body: dict[str, object],
                                                     param: str, why: str) -> None:
    """OpenAI's wording, `Missing required parameter: 'messages[0].role'`, with the path in
    `param` too (not pydantic's `Field required`); the SDK raises it as a BadRequestError."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.post("/chat/completions", cast_to=object, body=body)
    assert caught.value.code == "missing_required_parameter" and caught.value.param == param
    assert caught.value.message.endswith(f"Missing required parameter: '{param}'{why}")


def test_unknown_model_is_404_for_the_sdk(client: openai.OpenAI) -> None:
    """An unknown model name → NotFoundError with code model_not_found."""
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert caught.value.code == "model_not_found"


def test_body_over_the_limit_is_413(gateway: Running) -> None:
    """A body larger than server.max_body_bytes → 413, without reading it all."""
    big = '{"model": "pt-fast", "messages": [{"role": "user", "content": "' + "x" * 70000 + '"}]}'
    _assert_openai_error(_post(gateway, big), 413)


def test_invalid_hint_is_400(gateway: Running) -> None:
    """An unknown task hint is rejected rather than ignored."""
    body = '{"model": "auto", "messages": [{"role": "user", "content": "x"}]}'
    error = _assert_openai_error(_post(gateway, body, headers={"x-slorouter-task": "poetry"}),
                                 400)
    assert error["param"] == "x-slorouter-task"


def test_conflicting_header_and_metadata_hints_are_400(gateway: Running) -> None:
    """`x-slorouter-task` and `metadata.task` with different values: a 400 naming the conflict,
    not a silent choice of one."""
    body = ('{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
            '"metadata": {"task": "math"}}')
    error = _assert_openai_error(_post(gateway, body, headers={"x-slorouter-task": "code"}), 400)
    assert (error["type"], error["code"]) == ("invalid_request_error", "conflicting_hint")
    assert error["param"] == "metadata.task"


@pytest.mark.parametrize(("header", "key", "code"), [
    ("x-slorouter-data-version", "data_version", "conflicting_data_version"),
    ("x-slorouter-session", "session_id", "conflicting_session"),
])
def test_conflicting_header_and_metadata_values_are_400(gateway: Running, header: str, key: str,
                                                        code: str) -> None:
    """The data version (cache scope) and the session (experiment unit) follow the hints' rule."""
    body = ('{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
            f'"metadata": {{"{key}": "two"}}}}')
    error = _assert_openai_error(_post(gateway, body, headers={header: "one"}), 400)
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error", code, f"metadata.{key}")


@pytest.mark.parametrize("model", ["pt-limited", "ll-limited"])
def test_upstream_429_becomes_rate_limit_error_with_retry_after(
        client: openai.OpenAI, model: str) -> None:
    """A throttled provider surfaces as RateLimitError and passes Retry-After on."""
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.response.headers.get("retry-after") is not None


@pytest.mark.parametrize("model", ["pt-broken", "ll-broken"])
def test_upstream_500_becomes_a_server_error(client: openai.OpenAI, model: str) -> None:
    """A failing provider surfaces as a 5xx the SDK raises as InternalServerError."""
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code in (502, 503)


@pytest.mark.parametrize("model", ["pt-hang", "ll-hang"])
def test_upstream_hang_becomes_a_504_within_the_deployment_timeout(
        client: openai.OpenAI, model: str) -> None:
    """A provider that never answers is cut off at its timeout and reported as 504."""
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code == 504
    assert time.monotonic() - started < 9  # the 3 s deployment timeout, generously


def test_client_timeout_header_shortens_the_deadline(gateway: Running) -> None:
    """x-slorouter-timeout-ms caps the whole request below the configured timeout."""
    body = '{"model": "pt-hang", "messages": [{"role": "user", "content": "x"}]}'
    started = time.monotonic()
    response = _post(gateway, body, headers={"x-slorouter-timeout-ms": "300"})
    _assert_openai_error(response, 504)
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("model", ["pt-cut", "ll-cut"])
def test_stream_cut_mid_answer_is_an_error_not_a_clean_end(
        client: openai.OpenAI, model: str) -> None:
    """After content was sent a cut upstream ends the stream with an error event."""
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    received = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.append(chunk)
    assert received  # content had started, so no fallback was possible


@pytest.mark.parametrize("model", ["pt-cut", "ll-cut", "ll-anthropic-cut"])
def test_a_stream_cut_mid_answer_says_so_in_plain_words(gateway: Running, model: str) -> None:
    """The error event of a stream the upstream cut after content says the connection closed
    mid-answer, whatever the adapter and wire: through litellm from Anthropic it carried
    aiohttp's own words ("Response payload is not completed: 400, message='Not enough data to
    satisfy transfer length header.'"), whose 400 read as an HTTP status."""
    body = {"model": model, "messages": MESSAGES, "stream": True}
    response = _post(gateway, json.dumps(body))
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: {")]
    error = events[-1].get("error")
    assert isinstance(error, dict), events[-1]
    assert error["code"] == "upstream_stream_cut"
    assert "mid-answer" in error["message"] and "payload" not in error["message"], error


def test_a_stream_cut_mid_answer_is_recorded_with_its_error_code(
        sim: Running, tmp_path: Path) -> None:
    """The recorded outcome of a stream that broke after its first content names the error's
    code (`upstream_stream_cut`), as every other error's outcome does, not only its class."""
    router = start_router(tmp_path, router_config(sim.base_url),
                          env={"TENANT_ONE_KEY": API_KEY, "SIM_KEY": "sim-key"},
                          extra_args=("--log-level", "debug"))
    try:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY,
                               max_retries=0, timeout=20)
        with pytest.raises(openai.APIError):
            for _ in client.chat.completions.create(model="pt-cut", messages=MESSAGES,
                                                    stream=True):
                pass
        deadline = time.monotonic() + 5
        finished: list[dict[str, object]] = []
        while not finished and time.monotonic() < deadline:
            time.sleep(0.1)
            finished = finished_requests(router.proc.log_path)
    finally:
        router.stop()
    assert [(f["error_type"], f["error_code"]) for f in finished] == [
        ("ProviderError", "upstream_stream_cut")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["pt-slow", "ll-slow"])
def test_client_disconnect_cancels_the_upstream_request(
        gateway: Running, sim: Running, model: str, stream: bool) -> None:
    """A client that hangs up makes the router cancel its upstream call (the simulator sees it).
    The SDK's read-timeout header is set far beyond the client's own 0.5 s here: sent as the SDK
    sends it, it would bound the router's deadline too, and the router would answer 504 first."""
    upstream = model.split("-", 1)[1]
    before = int(str(_sim_stats(sim, upstream).get("cancellations", 0)))
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-test-tenant-one",
                           max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model=model, messages=MESSAGES, stream=stream,
                                       extra_headers={"x-stainless-read-timeout": "60"})
    deadline = time.monotonic() + 5
    after = before
    while time.monotonic() < deadline and after <= before:
        time.sleep(0.1)
        after = int(str(_sim_stats(sim, upstream).get("cancellations", 0)))
    assert after == before + 1


def test_health_and_readiness(gateway: Running) -> None:
    """/healthz says the process is up; /readyz reports the checks and the policy version."""
    assert httpx.get(f"{gateway.base_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.base_url}/readyz").json()
    assert ready["status"] == "ready" and ready["policy_version"]
    assert len(ready["config_version"]) == 12 and ready["config_version"] != ready["policy_version"]


def test_unknown_path_is_an_openai_404(gateway: Running) -> None:
    """Unknown endpoints answer in the OpenAI error shape too."""
    _assert_openai_error(httpx.get(f"{gateway.base_url}/v1/nothing"), 404)


def test_wrong_method_on_chat_completions_is_an_openai_405(gateway: Running) -> None:
    """Only POST reaches the chat handler's fast path; other methods get 405 in OpenAI's shape."""
    _assert_openai_error(httpx.get(f"{gateway.base_url}/v1/chat/completions"), 405)


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("GET", "/v1/chat/completions", "OPTIONS, POST"),
    ("DELETE", "/v1/models", "GET, HEAD, OPTIONS"),
    ("POST", "/v1/models/pt-fast", "GET, HEAD, OPTIONS"),
])
def test_a_405_says_which_methods_the_path_allows(gateway: Running, method: str, path: str,
                                                  allow: str) -> None:
    """RFC 9110: a 405 carries `Allow`; the message names the method, the path and the
    methods to use."""
    response = httpx.request(method, f"{gateway.base_url}{path}", timeout=10)
    error = _assert_openai_error(response, 405)
    assert response.headers["allow"] == allow
    assert error["code"] == "http_error"
    assert error["message"] == f"{method} is not allowed on {path}: use {allow}"


@pytest.mark.parametrize(("path", "allow"), [
    ("/v1/chat/completions", "OPTIONS, POST"),
    ("/v1/models", "GET, HEAD, OPTIONS"),
    ("/v1/models/pt-fast", "GET, HEAD, OPTIONS"),
    ("/healthz", "GET, HEAD, OPTIONS"),
])
def test_options_answers_204_with_allow_and_no_cors(gateway: Running, path: str,
                                                    allow: str) -> None:
    """OPTIONS needs no key and runs no handler: 204, `Allow`, no body; no CORS headers, since
    the service configures none (a browser's preflight gets no permission from it)."""
    response = httpx.options(f"{gateway.base_url}{path}", timeout=10,
                             headers={"origin": "https://example.com",
                                      "access-control-request-method": "POST"})
    assert response.status_code == 204 and response.content == b""
    assert response.headers["allow"] == allow
    assert not [name for name in response.headers if name.startswith("access-control-")]
    assert response.headers.get("x-request-id")


def test_options_on_an_unknown_path_is_an_openai_404(gateway: Running) -> None:
    error = _assert_openai_error(httpx.options(f"{gateway.base_url}/v1/nothing"), 404)
    assert error["code"] == "unknown_url"


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/chat/completions/"),
    ("POST", "/v1/route/explain/"),
    ("GET", "/v1/models/"),
    ("GET", "/healthz/"),
])
@pytest.mark.parametrize("key", ["sk-test-tenant-one", None])
def test_a_trailing_slash_is_an_openai_404_never_a_redirect(gateway: Running, method: str,
                                                            path: str, key: str | None) -> None:
    """A path with a trailing slash is not served, with or without a key: OpenAI's 404
    `Invalid URL (...)`, not a 307 whose POST (key and body) a client would send again."""
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    body = {"model": "pt-fast", "messages": MESSAGES} if method == "POST" else None
    response = httpx.request(method, f"{gateway.base_url}{path}", json=body, headers=headers,
                             timeout=10, follow_redirects=False)
    error = _assert_openai_error(response, 404)
    assert "location" not in response.headers
    assert error["code"] == "unknown_url" and error["message"] == f"Invalid URL ({method} {path})"


@pytest.mark.parametrize("head", [
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nidempotency-key: a\x01b\r\n"
    b"content-length: 2\r\n\r\n{}",
    b"POST /v1/chat completions HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2\r\n\r\n{}",
])
def test_a_request_http_does_not_allow_is_an_openai_400(gateway: Running, head: bytes) -> None:
    """A control character in a header, or a malformed request line, never reaches the app:
    uvicorn answered it `Invalid HTTP request received.` in plain text. It is OpenAI's error
    shape now, with a request id, and the connection closes."""
    host, port = gateway.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(head)
        raw = b""
        while chunk := connection.recv(65536):
            raw += chunk
    status_line, _, rest = raw.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in headers.split(b"\r\n"))
    assert status_line == b"HTTP/1.1 400 Bad Request"
    assert fields[b"content-type"] == b"application/json" and fields[b"x-request-id"]
    assert fields[b"connection"] == b"close"
    error = json.loads(body)["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error", "invalid_http_request", None)


def test_an_idempotency_key_sent_twice_is_a_400(gateway: Running, sim: Running) -> None:
    """Which of two keys guards the side effect would be a guess (the first was taken, and a
    proxy joining repeated headers makes a third key of them): refused before anything runs."""
    before = _sim_stats(sim, "fast").get("requests", 0)
    response = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json={"model": "pt-fast", "messages": MESSAGES},
        headers=[("authorization", f"Bearer {API_KEY}"), ("idempotency-key", "aa"),
                 ("idempotency-key", "bb")], timeout=20)
    error = _assert_openai_error(response, 400)
    assert (error["code"], error["param"]) == ("invalid_idempotency_key", "Idempotency-Key")
    assert "more than once" in str(error["message"])
    assert _sim_stats(sim, "fast").get("requests", 0) == before
    once = httpx.post(f"{gateway.base_url}/v1/chat/completions",
                      json={"model": "pt-fast", "messages": MESSAGES},
                      headers={"authorization": f"Bearer {API_KEY}", "idempotency-key": "aa"},
                      timeout=20)
    assert once.status_code == 200


@pytest.mark.parametrize("order", ["valid-first", "valid-last"])
def test_an_authorization_header_sent_twice_is_a_401(gateway: Running, order: str) -> None:
    """The first was taken: a wrong key then a valid one was refused, a valid one then a wrong
    one served, and a proxy in front that reads the last header judges the other way."""
    keys = [f"Bearer {API_KEY}", "Bearer sk-not-a-key"]
    if order == "valid-last":
        keys.reverse()
    response = httpx.post(f"{gateway.base_url}/v1/chat/completions",
                          json={"model": "pt-fast", "messages": MESSAGES},
                          headers=[("authorization", key) for key in keys], timeout=20)
    error = _assert_openai_error(response, 401)
    assert error["code"] == "invalid_api_key" and "more than once" in str(error["message"])


def test_the_sdk_posting_to_a_trailing_slash_gets_not_found(gateway: Running) -> None:
    """The openai client follows redirects: a 307 would have had it POST the request again to
    the route without the slash and get an answer from a URL that does not exist."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.post("/chat/completions/", cast_to=object,
                    body={"model": "pt-fast", "messages": MESSAGES})
    assert caught.value.code == "unknown_url"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/models/no-such-model", 404),
    ("GET", "/v1/no-such-endpoint", 404),
    ("GET", "/v1/chat/completions", 405),
    ("GET", "/healthz", 200),
])
def test_every_response_carries_a_request_id(gateway: Running, method: str, path: str,
                                             status: int) -> None:
    """Not only chat completions: any answer, errors included, can be quoted by its id; the
    client's own `x-request-id` is kept."""
    made = httpx.request(method, f"{gateway.base_url}{path}", timeout=10)
    given = httpx.request(method, f"{gateway.base_url}{path}", timeout=10,
                          headers={"x-request-id": "client-chosen-id"})
    assert made.status_code == given.status_code == status
    assert len(made.headers.get("x-request-id", "")) >= 16
    assert given.headers.get_list("x-request-id") == ["client-chosen-id"]


def test_a_request_id_no_feedback_could_name_is_refused_not_kept(gateway: Running) -> None:
    """A client's `x-request-id` is echoed and kept with the request's experiment exposure
    (200,000 a tenant): one of megabytes (uvicorn bounds no header) let a tenant fill the
    memory every tenant shares. An id `POST /v1/feedback` could not name (over 128
    characters, or not printable ASCII) is a 400 `invalid_request_id` answered under an id made
    here; one of 128 is kept. Other endpoints echo only such an id, and make one otherwise."""
    url, key = f"{gateway.base_url}/v1/chat/completions", f"Bearer {API_KEY}".encode()
    body = {"model": "pt-fast", "messages": MESSAGES}
    for bad in [b"r" * 129, b"r" * 100_000, b"caf\xe9", b"a\tb"]:
        refused = httpx.post(url, json=body, timeout=10,
                             headers={b"authorization": key, b"x-request-id": bad})
        assert refused.status_code == 400, refused.text[:200]
        assert refused.json()["error"]["code"] == "invalid_request_id"
        assert refused.json()["error"]["param"] == "x-request-id"
        assert len(refused.headers["x-request-id"]) == 32
        echoed = httpx.get(f"{gateway.base_url}/v1/models", timeout=10,
                           headers={b"x-request-id": bad})
        assert echoed.status_code == 200 and len(echoed.headers["x-request-id"]) == 32
    longest = "r" * 128
    kept = httpx.post(url, json=body, timeout=10,
                      headers={b"authorization": key, b"x-request-id": longest.encode()})
    assert kept.status_code == 200 and kept.headers["x-request-id"] == longest


def test_request_ids_made_here_tell_nothing_of_other_requests(gateway: Running) -> None:
    """Ids the router makes are drawn at random, each on its own: ids built from a counter let
    a tenant read, from two of its own requests' ids, how many requests others sent between
    them. Two ids in a row share no prefix and do not differ by a small step."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    ids = []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(model="pt-fast",
                                                               messages=MESSAGES)
        ids.append(raw.headers["x-request-id"])
    other = httpx.get(f"{gateway.base_url}/healthz", timeout=10).headers["x-request-id"]
    first, second = ids
    assert len({first, second, other}) == 3
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in (first, second, other))
    assert first[:8] != second[:8] != other[:8]
    assert abs(int(second, 16) - int(first, 16)) > 2**64
