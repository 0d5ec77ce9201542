"""The OpenAI SDK's own retries stop where slorouter says not to retry.

The SDKs retry 408, 409, 429 and 5xx twice by default, with no `Idempotency-Key`. A side effect
that failed after it was sent is a 504 `unknown_commit` (it may have run), and a deployment the
provider refuses (401) is a 502 that only a configuration change fixes: both answers carry
`x-should-retry: false`, so the SDK gives up at once. The simulator counts what reached it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-sdk-retries"
PAYMENT_TOOL: Any = [{"type": "function", "function": {
    "name": "send_payment", "parameters": {"type": "object", "properties": {
        "amount": {"type": "number"}}}}}]


# One hanging deployment for each request the classifier decides alone, so that no case meets a
# circuit the others' failures opened.
_CLASSIFIED_TEXTS = ("hey", "hello 3", "Transfer $500 from checking to savings")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory = tmp_path_factory.mktemp("sdk-retries")
    sim = start_simulator(directory, {"hang": {"hang_rate": 1.0}, "ok": {}})
    classified = "\n".join(
        f"  - {{name: hang-{i}, model: openai/hang, adapter: openai_passthrough, "
        f"api_base: '{sim.base_url}/v1', input_price_per_mtok: 1, output_price_per_mtok: 1, "
        f"timeout_s: 0.5}}" for i in range(len(_CLASSIFIED_TEXTS)))
    classified_models = ", ".join(f"{{name: hang-{i}, deployments: [hang-{i}]}}"
                                  for i in range(len(_CLASSIFIED_TEXTS)))
    config = f"""version: 1
deployments:
  - {{name: hang, model: openai/hang, adapter: openai_passthrough, api_base: '{sim.base_url}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 0.5}}
  - {{name: patient, model: openai/hang, adapter: openai_passthrough,
     api_base: '{sim.base_url}/v1', input_price_per_mtok: 1, output_price_per_mtok: 1,
     timeout_s: 60}}
  - {{name: badkey, model: openai/ok, adapter: openai_passthrough,
     api_base: '{sim.base_url}/nowhere/v1', input_price_per_mtok: 1, output_price_per_mtok: 1}}
{classified}
models: [{{name: hang, deployments: [hang]}}, {{name: badkey, deployments: [badkey]}},
         {{name: patient, deployments: [patient]}}, {classified_models}]
routes: {{default_model: hang}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 0}}
"""
    router = start_router(directory, config, env={"TENANT_KEY": API_KEY})
    yield router, sim
    router.stop()
    sim.stop()


def _upstream_requests(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()
    return sum(int(m.get("requests", 0)) for m in stats["models"].values()) + int(
        stats.get("unknown_model_requests", 0))


def _client(router: Running, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY,
                         max_retries=max_retries, timeout=30)


@pytest.mark.parametrize(("task", "retries", "calls", "should_retry"), [
    ("action", 2, 1, "false"),  # unknown_commit: the payment is sent once, not three times
    ("chat", 1, 2, None),  # a read that timed out may be retried: the SDK's call and its retry
])
def test_the_sdk_retries_a_hung_call_only_when_it_is_a_read(
        stack: tuple[Running, Running], task: str, retries: int, calls: int,
        should_retry: str | None) -> None:
    router, sim = stack
    before = _upstream_requests(sim)
    with pytest.raises(openai.APIStatusError) as caught:
        _client(router, max_retries=retries).chat.completions.create(
            model="hang", tools=PAYMENT_TOOL if task == "action" else openai.omit,
            extra_headers={"x-slorouter-task": task},
            messages=[{"role": "user", "content": "Send 100 dollars to account 42"}])
    assert caught.value.status_code == 504
    if task == "action":
        assert caught.value.body["code"] == "unknown_commit"  # type: ignore[index]
    assert caught.value.response.headers.get("x-should-retry") == should_retry
    assert _upstream_requests(sim) - before == calls


@pytest.mark.parametrize(("text", "calls", "should_retry"), [
    ("hey", 2, None),  # `action` to the model, on one word: a read, retried
    ("hello 3", 2, None),
    ("Transfer $500 from checking to savings", 1, "false"),  # an action it is sure of
])
def test_only_an_action_the_classifier_is_sure_of_is_held_to_one_call(
        stack: tuple[Running, Running], text: str, calls: int, should_retry: str | None) -> None:
    """Without a hint the classifier decides. Short messages were `action` to the model (29-41%
    of greetings and single words, from CLINC's short commands), so a hung "hey" was a 504
    `unknown_commit` the SDK may not retry, as if it had moved money; now an action must be
    likely (P >= 0.7) and at least three words to be taken to act."""
    router, sim = stack
    before = _upstream_requests(sim)
    with pytest.raises(openai.APIStatusError) as caught:
        _client(router, max_retries=1).chat.completions.create(
            model=f"hang-{_CLASSIFIED_TEXTS.index(text)}",
            messages=[{"role": "user", "content": text}])
    assert caught.value.status_code == 504
    assert (caught.value.body["code"] == "unknown_commit") == (calls == 1)  # type: ignore[index]
    assert caught.value.response.headers.get("x-should-retry") == should_retry
    assert _upstream_requests(sim) - before == calls


def test_a_replayed_unknown_commit_is_not_retried_by_the_sdk(
        stack: tuple[Running, Running]) -> None:
    """The same side effect sent again with its `Idempotency-Key` is answered from the key's
    record: the stored 504 `unknown_commit`, which must still say `x-should-retry: false`. The
    replay carried only the stored `x-slorouter-*` headers, so the SDK retried it twice more
    (three router requests, and a second and a half, for one answer that could not change)."""
    router, sim = stack
    key = {"Idempotency-Key": "sdk-retries-replayed-payment", "x-slorouter-task": "action"}
    messages: Any = [{"role": "user", "content": "Send 100 dollars to account 42"}]
    with pytest.raises(openai.APIStatusError):
        _client(router, max_retries=0).chat.completions.create(
            model="hang", tools=PAYMENT_TOOL, extra_headers=key, messages=messages)
    before, sent = _upstream_requests(sim), []
    counting = httpx.Client(event_hooks={"request": [sent.append]})
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=2,
                           timeout=30, http_client=counting)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="hang", tools=PAYMENT_TOOL, extra_headers=key,
                                       messages=messages)
    counting.close()
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "unknown_commit"  # type: ignore[index]
    assert caught.value.response.headers["x-slorouter-idempotent-replay"] == "true"
    assert caught.value.response.headers.get("x-should-retry") == "false"
    assert len(sent) == 1 and _upstream_requests(sim) == before


def test_a_misconfigured_deployment_is_not_retried_by_the_sdk(
        stack: tuple[Running, Running]) -> None:
    router, _ = stack
    client = _client(router, max_retries=2)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.with_raw_response.create(
            model="badkey", messages=[{"role": "user", "content": "hello"}])
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_not_found"  # type: ignore[index]
    assert caught.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("task", "retries", "calls", "code"), [
    ("action", 2, 1, "unknown_commit"),  # the payment is sent once, not three times
    ("chat", 1, 2, "deadline_exceeded"),  # a read: the SDK retries the router's 504
])
def test_the_router_answers_before_the_sdks_own_timeout(
        stack: tuple[Running, Running], task: str, retries: int, calls: int,
        code: str, stream: bool) -> None:
    """The SDK's own `timeout` (3 s, sent as `x-stainless-read-timeout`) is shorter than the
    deployment's, which hangs. The router answers a 504 before the SDK gives up, so the SDK
    reads it (and its `x-should-retry`) rather than timing out and retrying a side effect on its
    own. It answered at the SDK's timeout, counted from the request's arrival, after the SDK's
    timer (started as the request left) had run out: `APITimeoutError`, and the payment sent
    three times. A stream's head comes with its first token, so the SDK's timeout bounds the
    wait for it (not the rest of the stream): the same holds for a stream whose first token
    does not come."""
    router, sim = stack
    before = _upstream_requests(sim)
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY,
                           max_retries=retries, timeout=3)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="patient", tools=PAYMENT_TOOL if task == "action" else openai.omit,
            extra_headers={"x-slorouter-task": task}, stream=stream,
            messages=[{"role": "user", "content": "Send 100 dollars to account 42"}])
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == code  # type: ignore[index]
    assert _upstream_requests(sim) - before == calls
