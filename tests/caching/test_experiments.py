"""Experiments at a caching, multi-tenant router: each arm keeps its own cached answers, and
feedback is taken only from the tenant that made the request.

One router of its own (disk cache, the package's simulator and keys) with an experiment on the
`classification` task (unit user): `control` (the policy: `det`) against `treated`
(`model:arm`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.caching.service import (
    KEY_A,
    KEY_B,
    KEYS_ENV,
    Caller,
    Seen,
    disk_cache_block,
    policies_yaml,
    router_yaml,
    unique_messages,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """
experiments:
  - name: arms
    tasks: [classification]
    unit: user
    salt: cache-arms
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: treated, route: "model:arm", share: 0.5}
    metrics:
      - {name: thumbs_up, kind: binary}
      - {name: rating, kind: continuous, range: [1, 5]}
"""
HINTS = {"x-slorouter-task": "classification", "x-slorouter-risk": "low"}


@pytest.fixture(scope="module")
def router(sim: Running, tmp_path: Path) -> Iterator[Running]:
    config = router_yaml(sim.base_url, disk_cache_block(str(tmp_path / "cache")),
                         policies_yaml()) + EXPERIMENT
    running = start_router(tmp_path, config, env=KEYS_ENV, name="experiments")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-experiments")


@pytest.fixture(scope="module")
def calls(router: Running) -> Iterator[Caller]:
    caller = Caller(router.base_url)
    yield caller
    caller.close()


def _ask(calls: Caller, messages: list[dict[str, str]], user: str, key: str = KEY_A,
         headers: Mapping[str, str] | None = None) -> Seen:
    return calls.chat(messages, model="auto", key=key, user=user,
                      headers={**HINTS, **(headers or {})})


def _arm(seen: Seen) -> str:
    return seen.headers.get("x-slorouter-arm", "").partition("/")[2]


@pytest.fixture(scope="module")
def users(calls: Caller) -> dict[str, str]:
    """A user assigned to each arm (assignment is sticky per user)."""
    found: dict[str, str] = {}
    for i in range(64):
        user = f"user-{i}"
        seen = _ask(calls, unique_messages("assign"), user)
        assert seen.status == 200, seen.error
        found.setdefault(_arm(seen), user)
        if {"control", "treated"} <= found.keys():
            return found
    raise AssertionError(f"64 users did not reach both arms: {found}")


def test_each_arm_is_served_only_its_own_routes_cached_answers(calls: Caller,
                                                               users: dict[str, str]) -> None:
    """The same cacheable request from users in either arm: each arm's first one is a miss
    answered by its own route, each repeat a hit from that arm's entry."""
    messages = unique_messages("arms")
    control = _ask(calls, messages, users["control"])
    treated = _ask(calls, messages, users["treated"])
    control_again = _ask(calls, messages, users["control"])
    treated_again = _ask(calls, messages, users["treated"])
    assert [(_arm(s), s.cache, s.headers.get("x-slorouter-model"))
            for s in (control, treated, control_again, treated_again)] == [
        ("control", "miss", "det"), ("treated", "miss", "arm"),
        ("control", "hit", "det"), ("treated", "hit", "arm")]


def _feedback(base_url: str, key: str, request_id: str, metric: str,
              value: float) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/feedback", headers={"authorization": f"Bearer {key}"},
                      json={"request_id": request_id, "metric": metric, "value": value},
                      timeout=10)


def _once_exposed(base_url: str, key: str, request_id: str, metric: str,
                  value: float) -> httpx.Response:
    """Feedback, retried while the exposure (written just after the answer) is not there."""
    deadline = time.monotonic() + 5.0
    while True:
        response = _feedback(base_url, key, request_id, metric, value)
        if response.status_code != 404 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def test_feedback_on_another_tenants_request_is_not_found(router: Running, calls: Caller,
                                                         users: dict[str, str]) -> None:
    """Tenant B can neither learn the arm of, nor pre-empt feedback on, tenant A's request."""
    seen = _ask(calls, unique_messages("owner"), users["treated"], key=KEY_A)
    request_id = seen.headers["x-request-id"]
    owner_rating = _once_exposed(router.base_url, KEY_A, request_id, "rating", 4)
    intruder = _feedback(router.base_url, KEY_B, request_id, "thumbs_up", 0)
    owner = _feedback(router.base_url, KEY_A, request_id, "thumbs_up", 1)
    assert owner_rating.status_code == 200 and owner_rating.json()["recorded"] is True
    assert intruder.status_code == 404, intruder.text
    assert intruder.json()["error"]["code"] == "unknown_request"
    assert "treated" not in intruder.text
    assert owner.status_code == 200 and owner.json()["recorded"] is True


def test_two_tenants_sending_the_same_request_id_keep_their_own_arms(
        router: Running, calls: Caller, users: dict[str, str]) -> None:
    """A client-chosen `x-request-id` is the tenant's own: another tenant using the same id
    does not move the first one's feedback to its arm."""
    shared = {"x-request-id": f"shared-{uuid.uuid4().hex}"}
    a = _ask(calls, unique_messages("same-id"), users["treated"], key=KEY_A, headers=shared)
    b = _ask(calls, unique_messages("same-id"), users["control"], key=KEY_B, headers=shared)
    assert (_arm(a), _arm(b)) == ("treated", "control")
    from_a = _once_exposed(router.base_url, KEY_A, shared["x-request-id"], "rating", 5)
    from_b = _once_exposed(router.base_url, KEY_B, shared["x-request-id"], "rating", 1)
    assert (from_a.status_code, from_b.status_code) == (200, 200)
    assert (from_a.json()["arm"], from_b.json()["arm"]) == ("treated", "control")
    assert from_a.json()["recorded"] is True and from_b.json()["recorded"] is True
