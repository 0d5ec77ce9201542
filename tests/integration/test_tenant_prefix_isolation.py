"""One tenant's prompt never warms another tenant's prefix cache on self-hosted replicas.

Real processes: one simulator serving three replicas of a self-hosted model (each its own KV
prefix cache, which honours vLLM's `cache_salt`), one router with prefix affinity on and two
tenants, and the real `openai` client. `cached_tokens` in the answer's usage is what a tenant
could read to learn that someone else sent exactly its prompt prefix (TTFT falls with it).
The replicas are reached through the pass-through and through litellm; a fourth model, with
`tenant_cache_salt: false`, shows what the setting turns off.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import httpx
import openai
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

KEYS = {"acme": "sk-tenant-acme", "globex": "sk-tenant-globex"}
REPLICA = {"ttft_p50_ms": 5, "ttft_p99_ms": 10, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
           "output_tokens_p50": 4, "output_tokens_p99": 6, "prefix_cache_factor": 0.25,
           "prefix_cache_ttl_s": 3600, "prefix_cache_capacity": 256,
           "prefix_cache_min_tokens": 256}
REPLICAS = ("rep-0", "rep-1", "rep-2")
_QUESTIONS = count()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("tenant-prefix")
    sim = start_simulator(directory, {**{r: REPLICA for r in REPLICAS}, "shared": REPLICA})
    deployments, models = [], []
    for adapter, prefix in (("openai_passthrough", "pt"), ("litellm", "ll")):
        names = [f"{prefix}-{r}" for r in REPLICAS]
        deployments += [f"  - {{name: {prefix}-{r}, model: openai/{r}, adapter: {adapter}, "
                        f"api_base: '{sim.base_url}/v1', api_key: env:SIM_KEY, "
                        "input_price_per_mtok: 1, output_price_per_mtok: 1}" for r in REPLICAS]
        models.append(f"  - {{name: {prefix}-replicas, deployments: [{', '.join(names)}]}}")
    deployments.append(f"  - {{name: shared, model: openai/shared, adapter: openai_passthrough, "
                       f"api_base: '{sim.base_url}/v1', tenant_cache_salt: false, "
                       "input_price_per_mtok: 1, output_price_per_mtok: 1}")
    models.append("  - {name: shared, deployments: [shared]}")
    config = "\n".join([
        "version: 1", "deployments:", *deployments, "models:", *models,
        "routes: {default_model: pt-replicas}",
        "api_keys:", *(f"  - {{key: env:KEY_{t.upper()}, tenant: {t}}}" for t in KEYS),
        "server: {cache: {backend: none, prefix_affinity: true}}", ""])
    env = {f"KEY_{t.upper()}": key for t, key in KEYS.items()} | {"SIM_KEY": "sim-key"}
    router = start_router(directory, config, env=env)
    yield router
    router.stop()
    sim.stop()


def _system_prompt(name: str) -> str:
    """A long system prompt (about 1,200 tokens), distinct per test."""
    return f"You are the assistant of {name}. Follow the escalation playbook. " + "step " * 900


def _ask(gateway: Running, tenant: str, model: str, system: str,
         extra: dict[str, str] | None = None) -> int:
    """Send the system prompt and a question never asked before; the cached prompt tokens."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS[tenant],
                           max_retries=0)
    completion = client.chat.completions.create(
        model=model, extra_body=extra,
        messages=[{"role": "system", "content": system},
                  {"role": "user", "content": f"question {next(_QUESTIONS)}"}])
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    cached = completion.usage.prompt_tokens_details.cached_tokens
    assert cached is not None
    return cached


@pytest.mark.parametrize("model", ["pt-replicas", "ll-replicas"])
def test_another_tenants_identical_prefix_is_never_cached(gateway: Running, model: str) -> None:
    """acme warms a long prefix; globex sending the same prefix gets `cached_tokens == 0`
    (before: the affinity sent it to acme's replica, whose cache answered ~1,200 tokens);
    acme's next request with it still reads it from the cache."""
    system = _system_prompt(f"acme via {model}")
    assert _ask(gateway, "acme", model, system) == 0
    assert _ask(gateway, "globex", model, system) == 0
    assert _ask(gateway, "acme", model, system) > 1000
    assert _ask(gateway, "globex", model, system) > 1000  # globex's own reuse is kept too


def test_a_clients_own_cache_salt_is_kept_within_its_tenant(gateway: Running) -> None:
    """Two tenants choosing the same `cache_salt` still share nothing; one tenant's requests
    with its chosen salt reuse each other's prefix, and none with the tenant's default salt."""
    system, chosen = _system_prompt("a chosen salt"), {"cache_salt": "team-blue"}
    assert _ask(gateway, "acme", "pt-replicas", system, chosen) == 0
    assert _ask(gateway, "globex", "pt-replicas", system, chosen) == 0
    assert _ask(gateway, "acme", "pt-replicas", system) == 0
    assert _ask(gateway, "acme", "pt-replicas", system, chosen) > 1000


def test_a_deployment_with_tenant_cache_salt_off_shares_its_prefix_cache(
        gateway: Running) -> None:
    """`tenant_cache_salt: false` (a single-tenant server, or one that rejects unknown fields)
    sends no salt: the server's prefix cache is shared, as the setting documents."""
    system = _system_prompt("the shared deployment")
    assert _ask(gateway, "acme", "shared", system) == 0
    assert _ask(gateway, "globex", "shared", system) > 1000


def test_a_clients_own_cache_salt_reaches_salted_servers_only(gateway: Running) -> None:
    """A client's `cache_salt` goes to the servers that take one (`tenant_cache_salt` on) and
    to no other: the deployment with the setting off, a server that takes none or refuses
    unknown fields, gets none, so both tenants share its cache as without one. It reached every
    deployment, OpenAI's and Anthropic's included, which refuse it (the prompt-cache audit of
    2026-12-07: a client's vLLM salt failed every request `auto` sent to a hosted model)."""
    system, chosen = _system_prompt("a salt for no server"), {"cache_salt": "team-green"}
    assert _ask(gateway, "acme", "shared", system, chosen) == 0
    assert _ask(gateway, "globex", "shared", system, chosen) > 1000


def test_the_providers_prompt_caches_are_counted_without_a_result_cache(
        gateway: Running) -> None:
    """This router has no result cache (`backend: none`); what the providers' prompt caches
    answered is still at `/metrics` (it was only with a result cache, a setting of another
    cache; the prompt-cache audit of 2026-12-07)."""
    system = _system_prompt("the metrics")
    _ask(gateway, "acme", "pt-replicas", system)
    assert _ask(gateway, "acme", "pt-replicas", system) > 1000
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    cached = [line for line in text.splitlines()
              if line.startswith("slorouter_prompt_cache_cached_tokens")]
    assert cached and sum(float(line.rsplit(" ", 1)[1]) for line in cached) > 1000, cached
