"""Upstream errors that quote the request stay out of the running service's logs and traces.

Real providers put parts of the request in their errors (`Invalid value for
'messages[0].content': '...'`, a 413 with the payload, a content filter quoting the prompt) and
send malformed chunks holding the answer's text. The simulator's `<<fail:KIND>>` marker makes
it do each of these with the prompt (`router.providers.simulator.echo`); the router serves
them through both adapters, with DEBUG logs and every span printed to its output, and the
real `openai` client as the caller. The client may see the quote (it sent the prompt); the
router's output never holds it, nor any key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.conftest import API_KEY, FAST
from tests.support.services import Running, observed_gateway

pytestmark = pytest.mark.integration

# Short, and last in the prompt: pydantic cuts the middle out of the values its errors quote.
CANARY = "okapi-5e1d0b"
SIM_KEY = "sim-key-secret-4821"
ECHOED_FAILURES = ("400", "413", "422", "429", "500", "503", "stream", "chunk")
CONFIG = """version: 1
deployments:
  - {{name: pt-echo, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 5}}
  - {{name: ll-echo, model: openai/fast, adapter: litellm, api_base: '{base}/v1',
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 5}}
models:
  - {{name: pt-echo, deployments: [pt-echo]}}
  - {{name: ll-echo, deployments: [ll-echo]}}
routes: {{default_model: pt-echo}}
api_keys: [{{key: env:TENANT_ONE_KEY, tenant: tenant-one}}]
server:
  cache: {{backend: none}}
  reliability:
    max_retries_per_deployment: 0
    breaker: {{consecutive_failures: 1000000, min_volume: 1000000}}
"""


def _observed(directory: Path) -> contextlib.AbstractContextManager[tuple[Running, Path]]:
    """The echoing simulator behind a router whose logs and spans are printed to its log."""
    return observed_gateway(directory, {"fast": FAST}, lambda base: CONFIG.format(base=base),
                            {"TENANT_ONE_KEY": API_KEY, "SIM_KEY": SIM_KEY})


@pytest.fixture(scope="module")
def echoing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    with _observed(tmp_path_factory.mktemp("echoing")) as both:
        yield both


def test_upstream_failures_quoting_the_prompt_leave_it_out_of_logs_and_spans(
        echoing: tuple[Running, Path]) -> None:
    """Every failure the simulator quotes the prompt in, whole and streamed, through either
    adapter: the router's logs and console spans hold neither the prompt nor a key."""
    router, log = echoing
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    failed = 0
    for model in ("pt-echo", "ll-echo"):
        for kind in ECHOED_FAILURES:
            for stream in (False, True):
                messages: list[ChatCompletionMessageParam] = [
                    {"role": "user", "content": f"<<fail:{kind}>> {CANARY}"}]
                try:
                    answer = client.chat.completions.create(model=model, stream=stream,
                                                            messages=messages)
                    if stream:
                        list(answer)
                except openai.APIError:
                    failed += 1
    router.stop()  # its spans are printed by the time it has stopped
    output = log.read_text(errors="replace")
    assert failed >= 2 * 2 * (len(ECHOED_FAILURES) - 1)  # the upstream did fail them
    assert output.count('"request_finished"') == 2 * 2 * len(ECHOED_FAILURES)
    assert '"kind": "SpanKind.SERVER"' in output
    assert CANARY not in output
    assert API_KEY not in output and SIM_KEY not in output


# A client's value a `conflicting_*` 400 quotes: long (as long as `metadata` takes, OpenAI's
# 512 characters), with a canary past what may be echoed.
LONG_VALUE = "v" * 200 + "-marmot-77c2a1" + "w" * 298
PROMPT_CANARY = "tapir-90b3f4"


@pytest.fixture(scope="module")
def conflicting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    with _observed(tmp_path_factory.mktemp("conflicting")) as both:
        yield both


@pytest.mark.parametrize("long_in", ["metadata", "header"])
def test_a_conflicting_value_is_echoed_cut_short_and_never_logged(
        conflicting: tuple[Running, Path], long_in: str) -> None:
    """Header and `metadata` disagreeing (task hint, data version, session), or a hint header
    naming no task or risk: the 400 quotes at most 32 characters of each value, cut with an
    ellipsis, never the prompt. The message quoted the whole value, as long as whatever the
    client put there (a header of 10 kB)."""
    router, log = conflicting
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": f"hello {PROMPT_CANARY}"}]
    for header, key, code in (("x-slorouter-task", "task", "conflicting_hint"),
                              ("x-slorouter-data-version", "data_version",
                               "conflicting_data_version"),
                              ("x-slorouter-session", "session_id", "conflicting_session")):
        if key == "task":  # in metadata, a task hint that names no task is no hint at all
            header_value, metadata_value = LONG_VALUE, "code"
        else:
            header_value, metadata_value = (("one", LONG_VALUE) if long_in == "metadata"
                                            else (LONG_VALUE, "one"))
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="pt-echo", messages=messages,
                                           metadata={key: metadata_value},
                                           extra_headers={header: header_value})
        error = caught.value.response.json()["error"]
        assert error["code"] == code
        message = error["message"]
        assert len(message) < 250 and "v" * 32 + "…" in message, message
        assert "marmot" not in message and PROMPT_CANARY not in message
    with pytest.raises(openai.BadRequestError) as caught:  # an unknown hint is cut short too
        client.chat.completions.create(model="pt-echo", messages=messages,
                                       extra_headers={"x-slorouter-risk": LONG_VALUE})
    error = caught.value.response.json()["error"]
    assert error["code"] == "invalid_hint" and len(error["message"]) < 250, error
    # and so are a timeout and a priority that are not one (they were quoted whole)
    for header, code in (("x-slorouter-timeout-ms", "invalid_timeout"),
                         ("x-slorouter-priority", "invalid_priority")):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="pt-echo", messages=messages,
                                           extra_headers={header: LONG_VALUE})
        error = caught.value.response.json()["error"]
        assert error["code"] == code and len(error["message"]) < 250, error
        assert "v" * 32 + "…" in error["message"], error
    assert log.read_text(errors="replace").count('"request_finished"') >= 3


def test_conflicting_values_left_nothing_in_the_logs(conflicting: tuple[Running, Path]) -> None:
    """Runs after the requests above: stopped, the router has printed its spans."""
    router, log = conflicting
    router.stop()
    output = log.read_text(errors="replace")
    assert '"kind": "SpanKind.SERVER"' in output
    assert "marmot" not in output and PROMPT_CANARY not in output
