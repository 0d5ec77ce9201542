"""A temperature a provider refuses is not sent to it when another deployment takes it.

OpenAI's API takes `temperature` up to 2, Anthropic's up to 1 (a request above it is a 400
there, and in the simulator's Anthropic wire). A policy for `auto` that ranks a Claude model
first once sent `temperature: 1.5` to it and answered the client with that 400. Served end to
end (the simulator's OpenAI and Anthropic wires, the router as a process, the real `openai`
client): `auto` and a model with a replica on each wire route such a request to the deployment
that takes it; a model that has none sends it as asked, and its provider's 400 comes back.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of, served_by
from tests.support.procs import PYTHON
from tests.support.services import Running

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Write one line about the sea."}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    with claude_and_gpt(tmp_path_factory.mktemp("temperature")) as served:
        yield served.router, served.config_path


@pytest.mark.parametrize("stream", [False, True])
def test_auto_sends_a_temperature_above_anthropics_range_to_a_deployment_that_takes_it(
        setup: tuple[Running, Path], stream: bool) -> None:
    router, _ = setup
    assert served_by(router, "auto", stream, temperature=1.5) == "gpt-m"
    # the policy's first choice
    assert served_by(router, "auto", stream, temperature=0.5) == "claude-m"


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_sends_it_to_its_replica_that_takes_it(setup: tuple[Running, Path],
                                                       stream: bool) -> None:
    """Whichever replica the prompt would have gone to."""
    router, _ = setup
    served = {served_by(router, "mixed", stream, f"Line {n} about the sea.", temperature=1.5)
              for n in range(6)}
    assert served == {"gpt-m"}


def test_a_model_with_no_deployment_that_takes_it_is_sent_it_as_asked(
        setup: tuple[Running, Path]) -> None:
    """Its provider's own refusal comes back, naming the field."""
    router, _ = setup
    with pytest.raises(openai.BadRequestError) as caught:
        client_of(router).chat.completions.create(model="claude", messages=MESSAGES,
                                                temperature=1.5)
    body = caught.value.body
    assert isinstance(body, dict) and "temperature" in body["message"]


def test_explain_names_the_temperature_that_rules_a_deployment_out(
        setup: tuple[Running, Path]) -> None:
    _, config = setup
    request = {"model": "auto", "messages": MESSAGES, "temperature": 1.5}
    result = subprocess.run([PYTHON, "-m", "router.cli", "explain", "--config", str(config)],
                            input=json.dumps(request), capture_output=True, text=True,
                            timeout=120, check=True, env={**os.environ, "SIM_KEY": "sim-key"})
    explained = json.loads(result.stdout)
    assert explained["request"]["temperature"] == 1.5
    fits = {c["deployment"]: next(k for k in c["checks"] if k["name"] == "fits")
            for c in explained["candidates"]}
    assert not fits["claude-m"]["passed"]
    assert fits["claude-m"]["detail"] == "request's temperature 1.5 > deployment's most 1"
    assert fits["gpt-m"]["passed"]
