"""A cost ceiling prices a request that marks hour-long prompt-cache writes at the 1-hour write
price. Anthropic bills a prefix written for an hour (a client's `cache_control` with
`ttl: "1h"`) at twice the input price, the 5-minute writes the router marks at 1.25 times; the
ceiling's worst case and the output cap it sends priced every request at the latter, so such a
request could cost up to 1.6 times what the ceiling allowed (the prompt-cache audit of
2026-12-07). Through the router as a process, asked `/v1/route/explain`, which runs the same
decision as a chat request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from policies.loader import load_config_text
from router.runtime_config import resolve
from tests.support.procs import free_port
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

CEILING_USD = 0.05
CONFIG = f"""version: 1
deployments:
  - {{name: claude-1, model: anthropic/claude-x, adapter: litellm, api_key: env:KEY,
     api_base: 'http://127.0.0.1:{free_port()}', input_price_per_mtok: 3.0,
     output_price_per_mtok: 15.0, cache_write_price_per_mtok: 3.75,
     cache_write_1h_price_per_mtok: 6.0}}
  - {{name: gpt-1, model: openai/gpt-x, adapter: openai_passthrough,
     api_base: 'http://127.0.0.1:{free_port()}/v1', api_key: env:KEY,
     input_price_per_mtok: 3.0, output_price_per_mtok: 15.0,
     cache_write_1h_price_per_mtok: 6.0}}
models:
  - {{name: claude, deployments: [claude-1]}}
  - {{name: gpt, deployments: [gpt-1]}}
routes: {{default_model: claude}}
policies:
  default: {{candidates: [claude, gpt], max_cost_per_request_usd: {CEILING_USD}}}
server: {{cache: {{backend: none}}}}
"""
ENV = {"KEY": "sk-test-hour"}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_router(Path(tmp_path_factory.mktemp("hour-writes")), CONFIG, env=ENV)
    yield running
    running.stop()


def _explain(router: Running, words: int, ttl: str | None, where: str = "system"
             ) -> dict[str, Any]:
    marker: dict[str, str] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    system: dict[str, Any] = {"role": "system", "content": [
        {"type": "text", "text": " ".join(f"rule{n}" for n in range(words)),
         **({"cache_control": marker} if where == "system" else {})}]}
    tools = [{"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {
            "cache_control": {"type": "string", "description": 'say "ttl": "1h"'}}}},
        **({"cache_control": marker} if where == "tool" else {})}]
    explained = httpx.post(f"{router.base_url}/v1/route/explain", timeout=30, json={
        "model": "auto", "tools": tools, "messages": [
            system, {"role": "user", "content": "What does rule 7 say?"}]},
        headers={"x-slorouter-task": "chat"})
    assert explained.status_code == 200, explained.text
    return explained.json()


def _claude(explained: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in explained["candidates"] if c["deployment"] == "claude-1")


def _deployments() -> Any:
    return resolve(load_config_text(CONFIG, environ=ENV), ENV, lambda _m: None).deployments


@pytest.mark.parametrize("where", ["system", "tool"])
def test_an_hour_long_write_is_priced_at_the_hour_price(router: Running, where: str) -> None:
    hour, five = _explain(router, 1000, "1h", where), _explain(router, 1000, "5m", where)
    assert hour["request"]["hour_cache_writes"] and not five["request"]["hour_cache_writes"]
    prompt = hour["request"]["prompt_tokens_estimate"]
    assert prompt == five["request"]["prompt_tokens_estimate"]
    claude = _deployments()["claude-1"]
    # the worst case: every prompt token written, for an hour or for five minutes
    assert _claude(hour)["worst_case_cost_usd"] == pytest.approx(
        claude.cost_usd(prompt, 512, 0, prompt, prompt))
    assert _claude(five)["worst_case_cost_usd"] == pytest.approx(
        claude.cost_usd(prompt, 512, 0, prompt))
    # the cap sent keeps an hour-long write of the whole prompt within the ceiling
    cap = hour["request"]["output_cap"]
    assert cap < five["request"]["output_cap"]
    assert claude.cost_usd(prompt, cap, 0, prompt, prompt) <= CEILING_USD
    assert claude.cost_usd(prompt, cap + 1, 0, prompt, prompt) > CEILING_USD
    # an OpenAI-wire deployment has no write premium: the input price either way
    gpt = next(c for c in hour["candidates"] if c["deployment"] == "gpt-1")
    assert gpt["worst_case_cost_usd"] == pytest.approx((prompt * 3.0 + 512 * 15.0) / 1e6)


def test_a_prompt_over_the_ceiling_at_the_hour_price_leaves_the_deployment_out(
        router: Running) -> None:
    """A prompt the ceiling admits at the 5-minute write price, not at the hour's."""
    words = 1000
    while True:  # the smallest prompt the hour's price puts over the ceiling
        hour = _explain(router, words, "1h")
        if not _claude(hour)["eligible"]:
            break
        words += 100
        assert words < 5000
    prompt = hour["request"]["prompt_tokens_estimate"]
    claude = _deployments()["claude-1"]
    assert claude.cost_usd(prompt, 512, 0, prompt) <= CEILING_USD  # within, at five minutes
    assert _claude(_explain(router, words, "5m"))["eligible"]
    assert _claude(_explain(router, words, None))["eligible"]
    failed = [k for k in _claude(hour)["checks"] if not k["passed"]]
    assert [k["name"] for k in failed] == ["budget"], failed
    assert hour["choice"]["deployments"] == ["gpt-1"]
