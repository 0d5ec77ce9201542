"""A provider's refusal of a request (a 400: the request's fault) moves no other request.

`claude-m` is the policy's first choice for `auto` (the cheaper). A tenant sends twenty
requests pinned to `claude` with a temperature Anthropic refuses (0-1): each comes back as the
provider's 400, rightly. The breaker never counted such refusals, but the statistics counted
each as an error of `claude-m`: its error rate put it out of tier 0, and every tenant's `auto`
requests went to the dearer `gpt-m` until the errors decayed. Served end to end (the simulator's
two wires, the router as a process, the real `openai` client).
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of
from tests.support.services import Running

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Write one line about the sea."}]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("refused")) as served:
        yield served.router


def test_refused_requests_do_not_move_other_requests_off_the_deployment(
        router: Running) -> None:
    client = client_of(router)
    for _ in range(20):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="claude", messages=MESSAGES, temperature=1.5)
        assert caught.value.code == "upstream_rejected", caught.value.body
    served = [client.chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES).headers["x-slorouter-model"] for _ in range(10)]
    assert served == ["claude-m"] * 10
