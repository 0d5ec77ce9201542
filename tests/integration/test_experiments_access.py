"""`GET /v1/experiments` is an operator's reading: a tenant's key gets a 403.

An experiment's report aggregates every tenant's requests and feedback (arms' counts, latency,
error rates, metric means). It was served to any valid key, so one tenant read what the others'
traffic did. Now it needs a key with the `slorouter:operator` scope (`router.auth.OPERATOR_SCOPE`);
any other key gets a 403 `permission_error` in OpenAI's error shape. The caller here is the
real `openai` client's raw `get`, as a script of an operator's would be.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.services import FAST_PROFILE, Running, simulated_gateway

pytestmark = pytest.mark.integration

TENANT_KEY = "sk-test-experiments-tenant"
OPERATOR_KEY = "sk-test-experiments-operator"


def _config(base_url: str) -> str:
    return f"""version: 1
deployments:
  - {{name: fast-1, model: openai/fast, adapter: openai_passthrough,
     api_base: '{base_url}/v1', input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: fast-2, model: openai/fast, adapter: openai_passthrough,
     api_base: '{base_url}/v1', input_price_per_mtok: 1, output_price_per_mtok: 2}}
models: [{{name: one, deployments: [fast-1]}}, {{name: two, deployments: [fast-2]}}]
routes: {{default_model: one}}
api_keys:
  - {{key: env:TENANT_KEY, tenant: team-a, scopes: [read]}}
  - {{key: env:OPERATOR_KEY, tenant: ops, scopes: [slorouter:operator]}}
policies:
  default: {{candidates: [one]}}
experiments:
  - name: two-models
    tasks: [chat]
    unit: request
    salt: "2026-12"
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: other, route: "model:two", share: 0.5}}
server: {{cache: {{backend: none}}}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with simulated_gateway(tmp_path_factory.mktemp("experiments-access"),
                           {"fast": FAST_PROFILE}, _config,
                           {"TENANT_KEY": TENANT_KEY, "OPERATOR_KEY": OPERATOR_KEY}) as running:
        yield running


def _client(gateway: Running, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=key, max_retries=0,
                         timeout=30)


def test_a_tenants_key_may_not_read_the_experiments(gateway: Running) -> None:
    """The tenant's key serves its chat requests (they join the experiment) but reading the
    reports is a 403 `insufficient_permissions`, in OpenAI's error shape, naming the scope."""
    tenant = _client(gateway, TENANT_KEY)
    reply = tenant.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hello"}],
        extra_headers={"x-slorouter-task": "chat"})
    assert reply.choices
    with pytest.raises(openai.PermissionDeniedError) as caught:
        tenant.get("/experiments", cast_to=object)
    body = caught.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["type"], body["error"]["code"]) == (
        "permission_error", "insufficient_permissions")
    assert "slorouter:operator" in body["error"]["message"]
    with pytest.raises(openai.PermissionDeniedError):
        tenant.get("/experiments?name=two-models", cast_to=object)


def test_an_operators_key_reads_every_experiment(gateway: Running) -> None:
    """A key with the `slorouter:operator` scope gets the reports."""
    reports = _client(gateway, OPERATOR_KEY).get("/experiments", cast_to=object)
    assert isinstance(reports, dict) and reports["object"] == "list"
    assert [r["name"] for r in reports["data"]] == ["two-models"]


def test_no_key_is_still_a_401(gateway: Running) -> None:
    """Without a valid key the answer is the 401 it was, not a 403."""
    with pytest.raises(openai.AuthenticationError):
        _client(gateway, "sk-not-a-key").get("/experiments", cast_to=object)
