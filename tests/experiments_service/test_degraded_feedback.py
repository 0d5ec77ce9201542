"""Feedback on an answer control's route gave for an arm (`x-slorouter-arm-degraded`).

The `narrow` arm's model is barred from high-risk summaries by the task's risk rule, so its
high-risk requests are answered by the policy as written (the `steady` model) and carry
`x-slorouter-arm-degraded`. That answer is not the arm's: feedback on it must not count as the
arm's quality (it used to: the exposure was written at assignment, before the decision knew the
arm could not serve, so a quality guardrail and the report read `steady`'s quality as the arm's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.experiments_service.support import (
    TENANT_ENV,
    Seen,
    arm_of,
    client,
    feedback,
    feedback_when_exposed,
    metric_count,
    profile,
    report,
    router_yaml,
    send,
)
from tests.support.services import simulated_gateway

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: narrow
    tasks: [summarization]
    unit: user
    salt: narrow-1
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: narrow, route: "model:narrow", share: 0.5}
    metrics:
      - {name: thumbs_up, kind: binary}
"""
TASK_POLICY = "    summarization:\n      candidates: [steady, narrow]"
RISK_RULE = TASK_POLICY + "\n      risk:\n        high: {candidates: [steady]}"


@dataclass(frozen=True)
class Answers:
    degraded: Seen  # a high-risk request of the arm, answered by control's route
    proper: Seen  # a low-risk request of the arm, answered by the arm's model
    responses: tuple[int, int]  # feedback status: on the degraded answer, on the proper one
    thumbs: int  # the arm's `thumbs_up` count in the report afterwards
    requests: int  # the arm's request count in the report afterwards


async def _exercise(base_url: str) -> Answers:
    async with client(base_url) as http:
        degraded = proper = None
        for i in range(40):
            high = await send(http, "summarization", f"narrow-high-{i}", user=f"u{i}",
                              metadata={"risk": "high"})
            if high.degraded_arm == "narrow/narrow":
                degraded = high
                proper = await send(http, "summarization", f"narrow-low-{i}", user=f"u{i}")
                break
        assert degraded is not None and proper is not None, "no user hashed to the arm"
        assert degraded.clean and degraded.model == "steady" and degraded.arm is None
        assert proper.clean and proper.arm == "narrow" and proper.model == "narrow"
        await asyncio.sleep(0.5)  # the outcomes (and any exposure) are written after the answer
        on_degraded = await feedback(http, degraded.request_id, "thumbs_up", 1)
        on_proper = await feedback_when_exposed(http, proper.request_id, "thumbs_up", 0)
        rep = await report(http, "narrow")
    return Answers(degraded, proper, (on_degraded.status_code, on_proper.status_code),
                   metric_count(rep, "narrow", "thumbs_up"), arm_of(rep, "narrow")["requests"])


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Answers]:
    def config(sim_base: str) -> str:
        written = router_yaml(sim_base, ["steady", "narrow"], ["steady"],
                              {"summarization": ["steady", "narrow"]}, EXPERIMENT)
        assert TASK_POLICY in written
        return written.replace(TASK_POLICY, RISK_RULE)

    with simulated_gateway(tmp_path_factory.mktemp("degraded-feedback"),
                           {"steady": profile(10), "narrow": profile(10)}, config,
                           TENANT_ENV) as router:
        yield asyncio.run(_exercise(router.base_url))


def test_feedback_on_a_degraded_answer_is_not_the_arms(answers: Answers) -> None:
    """Feedback on the answer control's route gave for the arm is a 404 (`unknown_request`),
    while feedback on the arm's own answer is recorded: the arm's quality holds only values
    about its own route's answers."""
    assert answers.responses == (404, 200)
    assert answers.thumbs == 1


def test_a_request_the_policy_bars_the_arms_model_from_is_not_the_arms(answers: Answers) -> None:
    """The high-risk request is outside what the arm can be asked (the risk rule bars its
    model): it is neither an error nor a success of the arm, so the arm's error rate and its
    `error_rate` guardrail hold only requests its route served. It used to count as a
    success (error 0, no latency), so barred requests diluted a failing arm's error rate."""
    assert answers.requests == 1
