"""A request that names its model, held to its task's risk rule, end to end: by default it
skips every policy check; with `policies.enforce_risk_rule_on_pinned_requests` the risk rule
(zero data retention, `cache: false`) applies to it as to `auto`. Two routers over one
simulator, differing only in that setting; the real openai client as the caller."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import openai
import pytest
from openai._legacy_response import LegacyAPIResponse
from openai.types.chat import ChatCompletion

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

FAST = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20}


def _config(sim_base: str, enforce: bool) -> str:
    return f"""version: 1
deployments:
  - {{name: shared-fast, model: openai/fast, adapter: openai_passthrough,
     api_base: {sim_base}/v1, input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: zdr-fast, model: openai/fast, adapter: openai_passthrough,
     api_base: {sim_base}/v1, input_price_per_mtok: 1, output_price_per_mtok: 2,
     zero_data_retention: true}}
models:
  - {{name: open, deployments: [shared-fast]}}
  - {{name: private, deployments: [zdr-fast]}}
routes: {{aliases: [auto], default_model: open}}
policies:
  enforce_risk_rule_on_pinned_requests: {str(enforce).lower()}
  default:
    candidates: [open, private]
    risk:
      high: {{require_zero_data_retention: true}}
      medium: {{cache: false}}
  tasks:
    extraction:
      candidates: [open, private]
      risk:
        medium: {{candidates: [private]}}
server:
  request_timeout_s: 10
  cache: {{default: {{enabled: true, ttl_s: 60}}}}
"""


@pytest.fixture(scope="module")
def routers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    """(the default router, the router that enforces the risk rule on pinned requests)"""
    directory = tmp_path_factory.mktemp("pinned-risk")
    with ExitStack() as started:  # each stopped even when a later one fails to start
        sim = start_simulator(directory, {"fast": FAST})
        started.callback(sim.stop)
        default = start_router(directory, _config(sim.base_url, enforce=False), name="default")
        started.callback(default.stop)
        enforcing = start_router(directory, _config(sim.base_url, enforce=True),
                                 name="enforcing")
        started.callback(enforcing.stop)
        yield default, enforcing


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0,
                         timeout=20)


def _ask(router: Running, model: str, risk: str, prompt: str = "Summarise the news",
         ) -> LegacyAPIResponse[ChatCompletion]:
    """The raw response (headers and body) to a deterministic summarization request at
    `risk` (temperature 0: cacheable where a rule allows it)."""
    return _client(router).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], temperature=0,
        extra_headers={"x-slorouter-task": "summarization", "x-slorouter-risk": risk})


def _stream(router: Running, model: str, risk: str) -> str:
    """The streamed answer's text to a summarization request at `risk`."""
    chunks = _client(router).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Summarise the news"}], stream=True,
        extra_headers={"x-slorouter-task": "summarization", "x-slorouter-risk": risk})
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_by_default_a_pinned_high_risk_request_reaches_a_deployment_without_retention_guarantee(
        routers: tuple[Running, Running]) -> None:
    """Today's behaviour, unchanged without the setting: the risk rule does not apply."""
    default, _ = routers
    raw = _ask(default, "open", "high")
    assert raw.headers["x-slorouter-model"] == "shared-fast"
    assert raw.parse().choices[0].message.content


def test_an_enforced_risk_rule_refuses_a_pinned_model_with_a_400_naming_why(
        routers: tuple[Running, Running]) -> None:
    """High risk requires zero data retention; `open` has none: the SDK raises
    BadRequestError (not retried) with param `model` and the failed check, streamed or not,
    and the explain endpoint shows the pinned deployment's risk check."""
    _, enforcing = routers
    for ask in (lambda: _ask(enforcing, "open", "high"),
                lambda: _stream(enforcing, "open", "high")):
        with pytest.raises(openai.BadRequestError) as caught:
            ask()
        error = caught.value
        assert error.code == "model_not_allowed_for_risk" and error.param == "model"
        assert "shared-fast: risk high requires zero data retention" in error.message
        assert error.response.headers["x-slorouter-risk"] == "high"
        assert "x-slorouter-model" not in error.response.headers
    # refused, routed nowhere: no decision of `open` at high risk is counted (it was, one per
    # refusal, so a dashboard showed high-risk traffic going to the model without retention)
    metrics = httpx.get(f"{enforcing.base_url}/metrics", timeout=10).text
    assert not [line for line in metrics.splitlines()
                if line.startswith("slorouter_decisions_total") and 'model="open"' in line
                and 'risk="high"' in line]
    explained = httpx.post(f"{enforcing.base_url}/v1/route/explain", timeout=20, json={
        "model": "open", "messages": [{"role": "user", "content": "Summarise the news"}],
        "metadata": {"task": "summarization", "risk": "high"}}).json()
    assert explained["pinned"] is True and explained["choice"]["deployments"] == []
    assert [(c["deployment"], c["role"], c["checks"][0]["name"], c["eligible"])
            for c in explained["candidates"]] == [("shared-fast", "pinned", "risk", False)]


def test_an_enforced_risk_rule_lets_a_pinned_model_serve_what_it_allows(
        routers: tuple[Running, Running]) -> None:
    """The zero-data-retention model serves high risk when named; the other serves low risk:
    the setting refuses only what the rule refuses."""
    _, enforcing = routers
    assert _ask(enforcing, "private", "high").headers["x-slorouter-model"] == "zdr-fast"
    assert _ask(enforcing, "open", "low").headers["x-slorouter-model"] == "shared-fast"
    assert _stream(enforcing, "private", "high")


def test_an_enforced_risk_rule_turns_the_cache_off_for_a_pinned_request(
        routers: tuple[Running, Running]) -> None:
    """Medium risk has `cache: false`: the enforcing router bypasses the cache for the pinned
    request, where the default router caches it under `server.cache.default`."""
    default, enforcing = routers
    prompt = f"Summarise the minutes ({uuid.uuid4().hex[:8]})"

    def cache_status(router: Running) -> str | None:
        return _ask(router, "open", "medium", prompt).headers.get(
            "x-slorouter-cache")

    assert [cache_status(default) for _ in range(2)] == ["miss", "hit"]
    assert [cache_status(enforcing) for _ in range(2)] == ["bypass", "bypass"]


def test_an_answer_cached_at_low_risk_is_not_served_to_a_request_the_rule_refuses(
        routers: tuple[Running, Running]) -> None:
    """`extraction` at medium risk allows only `private`. The enforcing router caches
    `open`'s low-risk answer; the same body at medium risk is refused with the 400, streamed or
    not, never served that answer (it was written under a looser rule), while the low-risk
    repeat hits. The default router, which holds pinned requests to no rule, serves the
    medium-risk repeat from its cache."""
    default, enforcing = routers
    prompt = f"Extract the dates ({uuid.uuid4().hex[:8]})"

    def ask(router: Running, risk: str, stream: bool = False) -> str | None:
        raw = _client(router).chat.completions.with_raw_response.create(
            model="open", messages=[{"role": "user", "content": prompt}], temperature=0,
            stream=stream,
            extra_headers={"x-slorouter-task": "extraction", "x-slorouter-risk": risk})
        return raw.headers.get("x-slorouter-cache")

    for router in (default, enforcing):
        assert [ask(router, "low") for _ in range(2)] == ["miss", "hit"]
    assert ask(default, "medium") == "hit"
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            ask(enforcing, "medium", stream)
        assert caught.value.code == "model_not_allowed_for_risk"
    assert ask(enforcing, "low") == "hit"
