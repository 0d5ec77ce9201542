"""Run suites: every item to every listed logical model, graded, under bounded concurrency.

A logical model's items are spread round-robin over its deployments (they are interchangeable
replicas). One semaphore bounds all calls in flight, judge calls included. A failed call (error,
timeout, no text) scores 0 and keeps its error kind; so does an unparseable judge reply. The
result is one `Outcome` per (suite, item, model), in a stable order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from evals.run.calls import Callers, CallResult
from evals.run.graders import Grade, grade
from evals.run.judge import judge_messages, read_verdict
from evals.run.suite import Item, JudgeGrader, Suite, grader_of, item_messages
from policies.labels import Task
from router.providers.base import Deployment


@dataclass(frozen=True, slots=True)
class Outcome:
    """One graded item for one model."""

    suite: str
    task: Task
    metric: str
    model: str
    item: str
    score: float
    error: str | None
    note: str
    deployment: str
    answer: str | None
    seconds: float


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What to run: suites, the logical models under test, and how to reach every model."""

    suites: tuple[Suite, ...]
    models: tuple[str, ...]
    deployments: Mapping[str, tuple[Deployment, ...]]  # every configured logical model
    judges: Mapping[str, str]  # suite name -> judge's logical model (judge suites only)
    concurrency: int
    timeout_s: float | None  # None: each deployment's own timeout


def _question(item: Item) -> str:
    if item.prompt is not None:
        return item.prompt
    users = [m.content for m in item.messages or () if m.role == "user"]
    return users[-1]


class _Run:
    def __init__(self, plan: RunPlan, callers: Callers) -> None:
        self.plan = plan
        self.callers = callers
        self.gate = asyncio.Semaphore(plan.concurrency)

    async def _call(self, model: str, index: int, messages: list[dict[str, str]],
                    request: Mapping[str, object]) -> CallResult:
        replicas = self.plan.deployments[model]
        deployment = replicas[index % len(replicas)]
        timeout = self.plan.timeout_s if self.plan.timeout_s is not None else deployment.timeout_s
        async with self.gate:
            return await self.callers.call(deployment, messages, request, timeout)

    async def _judge(self, suite: Suite, spec: JudgeGrader, item: Item, index: int,
                     answer: str) -> tuple[Grade, str | None]:
        assert suite.judge is not None  # checked when the suite was loaded
        messages = judge_messages(spec, suite.judge, item, _question(item), answer,
                                  simulate=suite.expect_marker)
        request = {"max_tokens": suite.judge.max_tokens, "temperature": 0}
        result = await self._call(self.plan.judges[suite.name], index, messages, request)
        if result.text is None:
            return Grade(0.0, f"judge call failed: {result.detail}"), f"judge_{result.error}"
        verdict = read_verdict(suite.judge, result.text)
        if verdict is None:
            return Grade(0.0, f"judge reply unparseable: {result.text[:80]!r}"), "judge_unparseable"
        return verdict, None

    async def item(self, suite: Suite, item: Item, index: int, model: str) -> Outcome:
        result = await self._call(model, index, item_messages(suite, item), suite.request)
        error = result.error
        if result.text is None:
            graded = Grade(0.0, result.detail)
        else:
            spec = grader_of(suite, item)
            if isinstance(spec, JudgeGrader):
                graded, error = await self._judge(suite, spec, item, index, result.text)
            else:
                graded = grade(spec, result.text, item.expected)
        return Outcome(suite.name, suite.task, suite.metric, model, item.id, graded.score, error,
                       graded.note, result.deployment, result.text, result.seconds)


async def run_plan(plan: RunPlan, callers: Callers) -> list[Outcome]:
    """Every (suite, item, model) of the plan, graded; the callers stay open."""
    run = _Run(plan, callers)
    jobs = [run.item(suite, item, index, model)
            for suite in plan.suites
            for model in plan.models
            for index, item in enumerate(suite.items)]
    return list(await asyncio.gather(*jobs))
