"""`POST /v1/feedback` at the service: recording once, and clear 4xx in OpenAI's error shape.

Feedback targets the `ttft` experiment (metrics `thumbs_up`, binary, and `rating`, continuous
in [1, 5]) of the package's router. Every rejection must be a 4xx whose body is exactly
`{"error": {"message", "type", "param", "code"}}` and whose message says what was wrong.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import orjson
import pytest

from tests.experiments_service.support import (
    AUTH,
    Seen,
    chat_body,
    client,
    feedback,
    feedback_when_exposed,
    gather_limited,
    metric_count,
    report,
    send,
)
from tests.support.services import Running

pytestmark = pytest.mark.integration

IMMEDIATE_REQUESTS = 200
IMMEDIATE_CONCURRENCY = 4


@dataclass(frozen=True)
class Served:
    in_experiment: list[Seen]
    pinned_request_id: str  # answered, but pinned to a model: in no experiment


async def _serve(base_url: str) -> Served:
    async with client(base_url) as http:
        seen = [await send(http, "chat", f"feedback-{i}") for i in range(4)]
        pinned = await http.post("/v1/chat/completions", headers={
            **AUTH, "x-request-id": "feedback-pinned"}, json={
            "model": "steady", "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello"}]})
        assert pinned.status_code == 200 and "x-slorouter-arm" not in pinned.headers
    assert all(s.clean and s.arm is not None for s in seen)
    return Served(seen, "feedback-pinned")


@pytest.fixture(scope="module")
def served(gateway: Running) -> Served:
    return asyncio.run(_serve(gateway.base_url))


def _post(base_url: str, body: bytes | Mapping[str, Any],
          headers: Mapping[str, str] = AUTH) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return httpx.post(f"{base_url}/v1/feedback", content=content,
                      headers={**headers, "content-type": "application/json"}, timeout=10)


def _openai_error(response: httpx.Response, status: int, error_type: str,
                  code: str | None = None, param: str | None = None) -> str:
    """Check the status and OpenAI's error shape; return the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == error_type
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    message: str = error["message"]
    assert message
    return message


def test_valid_feedback_is_recorded_once_for_the_requests_arm(served: Served,
                                                                gateway: Running) -> None:
    """A valid value answers 200 with the request's experiment and arm; a repeat is ignored."""
    seen = served.in_experiment[0]
    before = asyncio.run(_count(gateway.base_url, seen.arm or "?", "rating"))
    response = asyncio.run(_submit(gateway.base_url, seen.request_id, "rating", 4))
    again = _post(gateway.base_url, {"request_id": seen.request_id, "metric": "rating",
                                     "value": 5})
    after = asyncio.run(_count(gateway.base_url, seen.arm or "?", "rating"))
    assert response.status_code == 200, response.text
    assert response.json() == {"request_id": seen.request_id, "experiment": "ttft",
                               "arm": seen.arm, "metric": "rating", "recorded": True}
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert after == before + 1


async def _submit(base_url: str, request_id: str, metric: str, value: float) -> httpx.Response:
    async with client(base_url) as http:
        return await feedback_when_exposed(http, request_id, metric, value)


async def _count(base_url: str, arm: str, metric: str) -> int:
    async with client(base_url) as http:
        return metric_count(await report(http, "ttft"), arm, metric)


def test_unknown_metric_is_a_400_naming_the_declared_metrics(served: Served,
                                                             gateway: Running) -> None:
    """A metric the experiment does not declare: 400 `unknown_metric` listing the declared."""
    request_id = served.in_experiment[1].request_id
    asyncio.run(_submit(gateway.base_url, request_id, "thumbs_up", 1))  # exposure is known
    message = _openai_error(_post(gateway.base_url, {"request_id": request_id,
                                                     "metric": "stars", "value": 3}),
                            400, "invalid_request_error", "unknown_metric", "metric")
    assert "stars" in message and "rating" in message and "thumbs_up" in message


@pytest.mark.parametrize(("metric", "value", "says"), [
    ("rating", 7, "[1, 5]"),
    ("rating", 0.5, "[1, 5]"),
    ("thumbs_up", 0.5, "0 or 1"),
    ("thumbs_up", 2, "0 or 1"),
    ("thumbs_up", -1, "0 or 1"),
])
def test_out_of_range_value_is_a_400_saying_the_allowed_values(
        served: Served, gateway: Running, metric: str, value: float, says: str) -> None:
    """A value outside the declared range (or not 0/1 for a binary metric): 400 on `value`."""
    request_id = served.in_experiment[2].request_id
    asyncio.run(_wait_exposed(gateway.base_url, request_id))
    message = _openai_error(_post(gateway.base_url, {"request_id": request_id,
                                                     "metric": metric, "value": value}),
                            400, "invalid_request_error", "invalid_value", "value")
    assert says in message and metric in message


async def _wait_exposed(base_url: str, request_id: str) -> None:
    """Until the service knows the request (an out-of-range value never gets recorded)."""
    async with client(base_url) as http:
        response = await feedback_when_exposed(http, request_id, "rating", 99)
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("request_id", ["never-sent-request", "feedback-pinned"])
def test_unknown_or_unexposed_request_id_is_a_404(served: Served, gateway: Running,
                                                  request_id: str) -> None:
    """A request id never seen, or one served outside any experiment: 404 `unknown_request`."""
    assert served.pinned_request_id == "feedback-pinned"
    message = _openai_error(_post(gateway.base_url, {"request_id": request_id,
                                                     "metric": "rating", "value": 3}),
                            404, "not_found_error", "unknown_request", "request_id")
    assert request_id in message


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"request_id": "x", "metric": "rating"}, "missing_required_parameter", "value"),
    ({"request_id": "x", "metric": "rating", "value": "high"}, "invalid_type", "value"),
    ({"request_id": "x", "metric": "rating", "value": "5"}, "invalid_type", "value"),
    ({"request_id": "x", "metric": "thumbs_up", "value": True}, "invalid_type", "value"),
    ({"request_id": "", "metric": "rating", "value": 3}, "invalid_value", "request_id"),
    ({"request_id": "x", "metric": "rating", "value": 3, "comment": "nice"}, "invalid_value",
     "comment"),
    ({"metric": "rating", "value": 3}, "missing_required_parameter", "request_id"),
])
def test_malformed_body_is_a_400_naming_the_field(gateway: Running, body: dict[str, Any],
                                                  code: str, param: str) -> None:
    """Missing, mistyped, empty or unknown fields: 400 whose `param` names the field, coded and
    worded as in a chat request (`Missing required parameter: 'value'`, `invalid_type`)."""
    message = _openai_error(_post(gateway.base_url, body), 400, "invalid_request_error",
                            code, param)
    assert param in message
    if code == "missing_required_parameter":
        assert message.startswith(f"Missing required parameter: '{param}'"), message


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'{"value": 1e400}'])
def test_unparseable_body_is_a_400_invalid_json(gateway: Running, raw: bytes) -> None:
    """A body that is not a JSON object (or holds a non-finite number): 400 `invalid_json`."""
    _openai_error(_post(gateway.base_url, raw), 400, "invalid_request_error", "invalid_json")


def test_feedback_without_a_valid_key_is_a_401(served: Served, gateway: Running) -> None:
    """Feedback is authenticated like chat: no or a wrong key is a 401."""
    body = {"request_id": served.in_experiment[3].request_id, "metric": "rating", "value": 3}
    _openai_error(_post(gateway.base_url, body, headers={}), 401, "authentication_error")
    _openai_error(_post(gateway.base_url, body, headers={"authorization": "Bearer sk-wrong"}),
                  401, "authentication_error")


async def _immediate(base_url: str) -> Counter[int]:
    async with client(base_url) as http:
        async def one(i: int) -> int:
            seen = await send(http, "chat", f"immediate-{i}")
            return (await feedback(http, seen.request_id, "thumbs_up", 1)).status_code

        statuses = await gather_limited([partial(one, i) for i in range(IMMEDIATE_REQUESTS)],
                                        IMMEDIATE_CONCURRENCY)
    return Counter(statuses)


def test_feedback_sent_right_after_a_streamed_answer_is_accepted(gateway: Running) -> None:
    """A client that posts feedback as soon as it has read `[DONE]` is never told 404 (the
    exposure must be stored when the arm is assigned, not when the outcome is recorded)."""
    statuses = asyncio.run(_immediate(gateway.base_url))
    print(f"\nimmediate feedback after {IMMEDIATE_REQUESTS} streamed answers: {dict(statuses)}")
    assert statuses == Counter({200: IMMEDIATE_REQUESTS})



def test_an_explanation_shows_the_arm_and_records_no_exposure(gateway: Running) -> None:
    """`POST /v1/route/explain` decides as the request would be routed, arm included (the arm
    its request id hashes to, as a served request's), but it serves nothing: feedback on its id
    is a 404 (an explanation used to record an exposure, under the fixed id `explain`)."""
    request_id = "explained-request-1"
    body = chat_body("chat request explained: name three rivers.")
    headers = {**AUTH, "x-slorouter-task": "chat", "x-request-id": request_id}
    explained = httpx.post(f"{gateway.base_url}/v1/route/explain", json=body, headers=headers,
                           timeout=10)
    assert explained.status_code == 200, explained.text
    experiment = explained.json()["experiment"]
    time.sleep(0.2)  # an exposure write, had there been one, has landed
    _openai_error(_post(gateway.base_url, {"request_id": request_id, "metric": "rating",
                                           "value": 3}),
                  404, "not_found_error", "unknown_request", "request_id")
    _openai_error(_post(gateway.base_url, {"request_id": "explain", "metric": "rating",
                                           "value": 3}),
                  404, "not_found_error", "unknown_request", "request_id")
    served = asyncio.run(_send_one(gateway.base_url, request_id))
    assert experiment == {"name": served.experiment, "arm": served.arm,
                          "route": experiment["route"], "degraded": False}


async def _send_one(base_url: str, request_id: str) -> Seen:
    async with client(base_url) as http:
        return await send(http, "chat", request_id)
