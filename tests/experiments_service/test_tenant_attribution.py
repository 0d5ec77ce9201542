"""One tenant cannot halt another tenant's experiment arm by making its upstream fail.

Two tenants share the router and its experiments. Tenant B finds a `user` id that the
experiment hashes to the treatment arm (the answer's `x-slorouter-arm` says so), then sends
requests under it whose prompt makes the upstream answer 500 (the simulator's `<<fail:500>>`
marker, as real providers do with some inputs). Every tenant's outcomes were pooled, so the
error-rate guardrail halted the arm for everyone (the security audit: `experiment_arm_halted
... error rate 0.767` after 40 requests). Now, as the circuit breaker does, the guardrail must
also fire without each failing tenant's outcomes while the arm serves the others
(`router/experiments/guardrails.py`): B's failures alone halt nothing. An arm failing for
every tenant is still halted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.services import Running, gateway_and_simulator

pytestmark = pytest.mark.integration

KEYS = {"KEY_A": "sk-experiments-tenant-a", "KEY_B": "sk-experiments-tenant-b"}
PROFILE = {"ttft_p50_ms": 10, "ttft_p99_ms": 15, "tpot_p50_ms": 1, "tpot_p99_ms": 1,
           "output_tokens_p50": 4, "output_tokens_p99": 4, "output_tokens_max": 4}
MODELS = ("fast", "big", "big-2")
EXPERIMENT = """  - name: {name}
    tasks: [{task}]
    unit: user
    salt: tenants-1
    arms:
      - {{name: control, route: "model:fast", control: true, share: 0.5}}
      - {{name: treat, route: "model:{treat}", share: 0.5}}
    guardrails:
      - {{kind: error_rate, max_rate: 0.05, min_sample: 30, window: 100}}
"""


def _config(base: str) -> str:
    deployments = "".join(
        f"\n  - {{name: {m}, model: openai/{m}, adapter: openai_passthrough, "
        f"api_base: '{base}/v1', input_price_per_mtok: 1, output_price_per_mtok: 2}}"
        for m in MODELS)
    models = "".join(f"\n  - {{name: {m}, deployments: [{m}]}}" for m in MODELS)
    experiments = (EXPERIMENT.format(name="poisoned", task="chat", treat="big")
                   + EXPERIMENT.format(name="outage", task="summarization", treat="big-2"))
    # No retries and a breaker that never opens: an arm's upstream errors reach its outcomes
    # as they are (the breaker's own attribution is tested in tests/integration).
    return f"""version: 1
deployments:{deployments}
models:{models}
routes: {{aliases: [auto], default_model: fast}}
policies:
  default: {{candidates: [fast]}}
api_keys:
  - {{key: env:KEY_A, tenant: tenant-a, scopes: [read, "slorouter:operator"]}}
  - {{key: env:KEY_B, tenant: tenant-b, scopes: [read]}}
server:
  cache: {{backend: none}}
  reliability:
    max_retries_per_deployment: 0
    breaker: {{consecutive_failures: 1000000, min_volume: 1000000}}
experiments:
{experiments}"""


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory: Path = tmp_path_factory.mktemp("experiment-tenants")
    with gateway_and_simulator(directory, dict.fromkeys(MODELS, PROFILE), _config,
                               KEYS) as both:
        yield both


def _ask(http: httpx.Client, key: str, task: str, user: str, text: str) -> httpx.Response:
    return http.post("/v1/chat/completions",
                     headers={"authorization": f"Bearer {KEYS[key]}", "x-slorouter-task": task},
                     json={"model": "auto", "user": user, "max_tokens": 4,
                           "messages": [{"role": "user", "content": text}]})


def _arm(reply: httpx.Response) -> str | None:
    return reply.headers.get("x-slorouter-arm", "").partition("/")[2] or None


def _report(http: httpx.Client, name: str) -> dict[str, Any]:
    reply = http.get("/v1/experiments", params={"name": name},
                     headers={"authorization": f"Bearer {KEYS['KEY_A']}"})
    reply.raise_for_status()
    found: dict[str, Any] = reply.json()["data"][0]
    return found


def _halted(http: httpx.Client, name: str) -> list[str]:
    return [h["arm"] for h in _report(http, name)["halts"] if h["persisted"]]


def _users_on(http: httpx.Client, key: str, task: str, prefix: str,
              count: int) -> dict[str, str]:
    """`count` users of the tenant, each served once: user → the arm it was served by."""
    arms = {}
    for number in range(count):
        user = f"{prefix}-{number}"
        reply = _ask(http, key, task, user, f"Say hello {number}")
        assert reply.status_code == 200, reply.text
        arms[user] = _arm(reply) or "none"
    return arms


def test_one_tenants_failures_on_an_arm_do_not_halt_it_for_the_others(
        services: tuple[Running, Running]) -> None:
    """B's 40 failing requests on the treatment arm, beside A's users served fine there: the
    arm is not halted, and A's users of it are still served by it."""
    router, _ = services
    with httpx.Client(base_url=router.base_url, timeout=30) as http:
        before = _users_on(http, "KEY_A", "chat", "alice", 40)
        on_treat = [user for user, arm in before.items() if arm == "treat"]
        assert len(on_treat) >= 10, before
        user_b = next(user for user in (f"b-{n}" for n in range(100))
                      if _arm(_ask(http, "KEY_B", "chat", user, "hi")) == "treat")
        poisoned = [_ask(http, "KEY_B", "chat", user_b, f"<<fail:500>> {n}").status_code
                    for n in range(40)]
        assert all(status >= 500 for status in poisoned), poisoned
        time.sleep(2.0)  # four guardrail passes
        halted = _halted(http, "poisoned")
        after = {user: _arm(_ask(http, "KEY_A", "chat", user, "Say hello again"))
                 for user in on_treat}
        report = _report(http, "poisoned")
    assert halted == [], report["halts"]
    assert set(after.values()) == {"treat"}, after
    treat = next(a for a in report["arms"] if a["name"] == "treat")
    assert treat["error_rate"] > 0.3, treat  # B's failures are the arm's outcomes all the same


def test_an_arm_failing_for_every_tenant_is_still_halted(
        services: tuple[Running, Running]) -> None:
    """Both tenants' users served by the treatment arm, then its model answers 500 to
    everything: the guardrail halts it within a hundred of its outcomes, and both tenants'
    users go to control."""
    router, sim = services
    with httpx.Client(base_url=router.base_url, timeout=30) as http:
        users = {**{(key, user): arm for key in KEYS for user, arm in
                    _users_on(http, key, "summarization", f"{key}-user", 20).items()}}
        on_treat = [key_user for key_user, arm in users.items() if arm == "treat"]
        assert {key for key, _ in on_treat} == set(KEYS), users
        httpx.post(f"{sim.base_url}/control/models/big-2", json={"error_rate_500": 1.0},
                   timeout=5).raise_for_status()
        try:
            sent = 0
            while not _halted(http, "outage") and sent < 200:
                for key, user in on_treat:
                    _ask(http, key, "summarization", user, f"Summarise this {sent}")
                    sent += 1
                time.sleep(0.5)
            after = {(key, user): _arm(_ask(http, key, "summarization", user, "Summarise"))
                     for key, user in on_treat}
        finally:
            httpx.post(f"{sim.base_url}/control/models/big-2", json={"error_rate_500": 0.0},
                       timeout=5).raise_for_status()
        halted = _halted(http, "outage")
    assert halted == ["treat"], sent
    assert sent <= 120, sent
    assert set(after.values()) == {"control"}, after
