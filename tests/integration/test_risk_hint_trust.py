"""An API key's `risk_hints: raise_only`: its risk hint may raise the risk, never lower it.

A risk hint (`x-slorouter-risk`, `metadata.risk`) replaces the classifier's risk, down as well as
up, above the detectors' floor. A client that is not trusted to call its request safer than it
looks could send `x-slorouter-risk: low` and escape the high-risk rule (here: only the `safe`
model, which keeps no data, may answer high-risk requests). Its key's `risk_hints: raise_only`
keeps the classifier's risk when the hint is lower. Two keys of one tenant, the real `openai`
client, the service over the provider simulator: the route each request takes (`x-slorouter-
model`) is what is checked, as `/v1/route/explain` shows it too.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.services import FAST_PROFILE, Running, simulated_gateway

pytestmark = pytest.mark.integration

TRUSTED_KEY = "sk-test-risk-hints-trusted"
UNTRUSTED_KEY = "sk-test-risk-hints-untrusted"
# The shipped classifier calls this request high risk on its own opinion (no detector fires):
# the test checks that first, so a retrained model that disagrees fails loudly, not silently.
HIGH_BY_MODEL = "How do I reset my router password?"
LOW_BY_MODEL = "Write a short poem about the sea."


def _config(base_url: str) -> str:
    return f"""version: 1
deployments:
  - {{name: cheap-1, model: openai/fast, adapter: openai_passthrough,
     api_base: '{base_url}/v1', input_price_per_mtok: 0.1, output_price_per_mtok: 0.2}}
  - {{name: safe-1, model: openai/fast, adapter: openai_passthrough,
     api_base: '{base_url}/v1', input_price_per_mtok: 5, output_price_per_mtok: 10}}
models: [{{name: cheap, deployments: [cheap-1]}}, {{name: safe, deployments: [safe-1]}}]
routes: {{default_model: cheap}}
api_keys:
  - {{key: env:TRUSTED_KEY, tenant: team-a}}
  - {{key: env:UNTRUSTED_KEY, tenant: team-a, risk_hints: raise_only}}
policies:
  default:
    candidates: [cheap, safe]
    risk: {{high: {{candidates: [safe]}}}}
server:
  cache: {{backend: none}}
  stats: {{explore_share: 0}}  # no exploration: a low-risk request always goes to cheap
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with simulated_gateway(tmp_path_factory.mktemp("risk-hints"), {"fast": FAST_PROFILE},
                           _config, {"TRUSTED_KEY": TRUSTED_KEY,
                                     "UNTRUSTED_KEY": UNTRUSTED_KEY}) as running:
        yield running


def _route(gateway: Running, key: str, prompt: str, risk: str | None) -> tuple[str, str]:
    """(risk, deployment) of one whole answer, as the response headers give them."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=key, max_retries=0,
                           timeout=30)
    headers = {"x-slorouter-risk": risk} if risk is not None else {}
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": prompt}], max_tokens=8,
        extra_headers=headers)
    assert raw.parse().choices[0].message.content
    return raw.headers["x-slorouter-risk"], raw.headers["x-slorouter-model"]


@pytest.mark.parametrize("key", [TRUSTED_KEY, UNTRUSTED_KEY])
def test_without_a_hint_both_keys_get_the_classifiers_risk(gateway: Running, key: str) -> None:
    assert _route(gateway, key, HIGH_BY_MODEL, None) == ("high", "safe-1")
    assert _route(gateway, key, LOW_BY_MODEL, None) == ("low", "cheap-1")


def test_a_trusted_keys_low_hint_lowers_the_risk(gateway: Running) -> None:
    """The default (`may_lower`): the hint replaces the classifier's risk."""
    assert _route(gateway, TRUSTED_KEY, HIGH_BY_MODEL, "low") == ("low", "cheap-1")


def test_a_raise_only_keys_low_hint_keeps_the_classifiers_risk(gateway: Running) -> None:
    """The same request and hint under the `raise_only` key stay high risk and go to `safe`."""
    assert _route(gateway, UNTRUSTED_KEY, HIGH_BY_MODEL, "low") == ("high", "safe-1")
    assert _route(gateway, UNTRUSTED_KEY, HIGH_BY_MODEL, "medium") == ("high", "safe-1")


@pytest.mark.parametrize("key", [TRUSTED_KEY, UNTRUSTED_KEY])
def test_either_keys_hint_may_raise_the_risk(gateway: Running, key: str) -> None:
    assert _route(gateway, key, LOW_BY_MODEL, "high") == ("high", "safe-1")
    assert _route(gateway, key, LOW_BY_MODEL, "medium")[0] == "medium"


def test_explain_shows_the_raise_only_keys_route(gateway: Running) -> None:
    """`/v1/route/explain` decides as the request would be: the key's trust applies there too."""
    body = {"model": "auto", "messages": [{"role": "user", "content": HIGH_BY_MODEL}],
            "metadata": {"risk": "low"}}
    risks = {}
    for name, key in (("trusted", TRUSTED_KEY), ("untrusted", UNTRUSTED_KEY)):
        reply = httpx.post(f"{gateway.base_url}/v1/route/explain", json=body, timeout=30,
                           headers={"authorization": f"Bearer {key}"})
        assert reply.status_code == 200, reply.text
        risks[name] = reply.json()["labels"]["risk"]
    assert risks == {"trusted": "low", "untrusted": "high"}
