"""A whitespace-only stop sequence is not sent to a provider that refuses it.

OpenAI stops at `"\\n"` (single-line completions ask for it); Anthropic refuses a stop sequence
that is empty or whitespace only (a 400: "each stop sequence must contain non-whitespace"), and
litellm sends it on. A policy for `auto` that ranks a Claude model first sent such requests to it
first: each paid a refused attempt before the next deployment answered, and until refusals
stopped counting as the deployment's errors (`test_refused_requests_stats.py`) they moved every
request off it. Served end to end (the simulator's OpenAI and Anthropic wires, the router as a
process, the real `openai` client): `auto` and a model with a replica on each wire route them to
the deployment that takes them, the fit check says why; a model that has none sends them as
asked, and its provider's 400 comes back.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of, served_by
from tests.support.services import Running

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("blank-stop")) as served:
        yield served.router


@pytest.mark.parametrize("stream", [False, True])
def test_auto_sends_a_whitespace_stop_to_a_deployment_that_takes_it(
        router: Running, stream: bool) -> None:
    assert served_by(router, "auto", stream, stop=["\n"]) == "gpt-m"
    assert served_by(router, "auto", stream, stop="\n\n") == "gpt-m"
    assert served_by(router, "auto", stream, stop=["END", " "]) == "gpt-m"
    # the policy's first choice
    assert served_by(router, "auto", stream, stop=["END"]) == "claude-m"


def test_a_model_sends_it_to_its_replica_that_takes_it(router: Running) -> None:
    """Whichever replica the prompt would have gone to."""
    served = {served_by(router, "mixed", False, f"Line {n} about the sea.", stop=["\n"])
              for n in range(6)}
    assert served == {"gpt-m"}


def test_a_model_with_no_deployment_that_takes_it_is_sent_it_as_asked(router: Running) -> None:
    """Its provider's own refusal comes back, naming the field."""
    with pytest.raises(openai.BadRequestError) as caught:
        client_of(router).chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "Hi"}], stop=["\n"])
    body = caught.value.body
    assert isinstance(body, dict) and "stop" in body["message"], body


def test_the_fit_check_rules_the_refusing_deployment_out(router: Running) -> None:
    explained = httpx.post(f"{router.base_url}/v1/route/explain", timeout=10, json={
        "model": "auto", "stop": ["\n"], "messages": [{"role": "user", "content": "Hi"}]})
    assert explained.status_code == 200, explained.text
    fits = {c["deployment"]: next(k for k in c["checks"] if k["name"] == "fits")
            for c in explained.json()["candidates"]}
    assert fits["claude-m"] == {"name": "fits", "passed": False, "detail": (
        "request has a whitespace-only stop sequence; deployment's provider refuses it")}
    assert fits["gpt-m"]["passed"]
