"""`POST /v1/route/explain`: the whole routing decision for a request, without calling a provider.

Takes a chat completions body, runs the same classify and decide steps as a real request, and
returns labels, every candidate with each check's verdict and its score, the choice and the
policy version. `explain_decision` is shared with the `slorouter explain` command.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from policies.eligibility import DeploymentFacts, worst_case_cost
from router.api.body import authorization_header, parse_chat, read_json
from router.api.body_budget import BodyBudget
from router.api.chat import prepare_off_loop
from router.api.errors import error_response
from router.api.request_ids import check_request_id
from router.auth import authenticate, key_finder
from router.execution.deadline import Deadline
from router.pipeline import (
    Caller,
    ChatPipeline,
    Prepared,
    arm_degraded,
    is_side_effecting,
    session_of,
)


def explain_decision(prepared: Prepared,
                     model_facts: Mapping[str, Sequence[DeploymentFacts]]) -> dict[str, Any]:
    """The decision as JSON. `model_facts`: the config's deployments' facts by model, to price
    each candidate at the output cap a ceiling sends."""
    labels, decision, facts = prepared.labels, prepared.decision, prepared.facts
    scores = {r.deployment: (r.score, r.why) for r in decision.ranking_detail}
    cap = _output_cap(prepared)
    at_cap = _costs_at_cap(prepared, cap, model_facts) if cap is not None else {}
    return {
        "policy_version": decision.policy_version,
        "requested": decision.requested,
        "pinned": decision.pinned,
        "labels": {"task": labels.task, "risk": labels.risk, "task_source": labels.task_source,
                   "signals": sorted(labels.signals),
                   # never retried once sent, nor hedged (an action taken to act, or such tools)
                   "side_effecting": is_side_effecting(labels),
                   "task_probs": dict(labels.task_probs), "risk_probs": dict(labels.risk_probs)},
        "request": {"prompt_tokens_estimate": facts.prompt_tokens,
                    "max_output_tokens": facts.max_output_tokens,
                    # what the cost ceiling caps an unlimited answer at, as it is sent
                    "output_cap": cap,
                    "needs_tools": facts.needs_tools, "needs_json": facts.needs_json,
                    "needs_logprobs": facts.needs_logprobs, "choices": facts.completions,
                    # marks prompt-cache writes for an hour: priced at the 1-hour write price
                    "hour_cache_writes": facts.hour_cache_writes,
                    "temperature": facts.temperature,
                    # how long its client waits (seconds from the decision): the ranking holds
                    # it to 0.9 of that where the task's latency target is longer
                    "first_token_wait_s": _rounded(facts.first_token_wait_s),
                    "answer_wait_s": _rounded(facts.answer_wait_s)},
        "candidates": [{
            "model": v.model, "deployment": v.deployment, "role": v.role,
            "eligible": v.eligible, "worst_case_cost_usd": v.cost_usd,
            # what it can cost with the output cap the request is sent (`output_cap`: the
            # worst case above prices a request without a limit at 512 tokens); None: no cap
            "cost_at_output_cap_usd": at_cap.get(v.deployment),
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail}
                       for c in v.checks],
            "score": scores.get(v.deployment, (None, None))[0],
            "score_detail": scores.get(v.deployment, (None, None))[1],
        } for v in decision.verdicts],
        "choice": {"model": decision.model, "deployments": list(decision.deployments),
                   "reason": decision.reason,
                   # a pinned model's replicas as ranked under the task's SLO: those expected
                   # to meet it are tried first (no policy check applies to them)
                   **({"replicas": [{"deployment": r.deployment, "score": r.score,
                                     "detail": r.why, "meets_slo": r.meets_slo}
                                    for r in decision.ranking_detail]}
                      if decision.pinned and decision.ranking_detail else {})},
        # whether the first attempt is hedged, after how long without a first content, and why
        "hedge": {"delay_ms": None if prepared.hedge.delay_s is None
                  else round(prepared.hedge.delay_s * 1000.0, 1),
                  "reason": prepared.hedge.reason},
        "experiment": None if prepared.assignment is None else {
            "name": prepared.assignment.experiment, "arm": prepared.assignment.arm,
            "route": prepared.assignment.route,
            # control's route answers for the arm (`x-slorouter-arm-degraded` when served)
            "degraded": arm_degraded(prepared.assignment, decision)},
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def _output_cap(prepared: Prepared) -> int | None:
    """The `max_completion_tokens` the router adds to a request that set no output limit,
    under a task's cost ceiling (`pipeline.output_cap`); None when it adds none."""
    if prepared.request.output_token_limit() is not None:
        return None
    cap = prepared.plan.body.get("max_completion_tokens")
    return cap if isinstance(cap, int) else None


def _costs_at_cap(prepared: Prepared, cap: int,
                  model_facts: Mapping[str, Sequence[DeploymentFacts]]) -> dict[str, float]:
    """Each candidate deployment's worst case at the output `cap` the router adds
    (`_output_cap`), by name. A cap above the 512 tokens the ceiling's check assumed is sent
    all the same (it is what keeps every deployment of the plan within the ceiling), so this
    is what the request can cost: an audit budgeting from the worst case saw a fallback cost
    more (2026-12-07)."""
    facts = replace(prepared.facts, max_output_tokens=cap)
    return {d.name: worst_case_cost(facts, d)
            for v in prepared.decision.verdicts
            for d in model_facts.get(v.model, ()) if d.name == v.deployment}


def explain_endpoint(pipeline: ChatPipeline, bodies: BodyBudget):  # type: ignore[no-untyped-def]
    """`bodies`: the chat endpoint's budget of request bodies in flight, which an explanation's
    body counts against too (it was read beside it unbounded: any key could hold memory past
    `max_body_bytes_in_flight`)."""
    async def explain(request: Request) -> Response:
        with contextlib.ExitStack() as held:  # the body's share of the budget until answered
            try:
                config = pipeline.config
                principal = authenticate(authorization_header(request.scope["headers"]),
                                         config.principals)
                check_request_id(request.headers.get("x-request-id"), key_finder(
                    request.headers.getlist("authorization"), config.principals))
                raw = await read_json(request, config.max_body_bytes, config.request_timeout_s,
                                      read=lambda size: held.enter_context(bodies.reserve(size)))
                chat = parse_chat(raw)
                metadata = chat.metadata if chat.metadata is not None else {}
                # As the request would be routed (its user, session, request id as experiment
                # units), but no exposure is recorded: an explanation is not a request served.
                caller = Caller(principal.tenant, request.headers.get("x-request-id") or
                                secrets.token_hex(16), chat.user,
                                session_of(request.headers, metadata), explaining=True,
                                risk_hints_may_lower=principal.risk_hints_may_lower,
                                scopes=principal.scopes)
                # The deadline the request would get: the client's timeout headers shorten it, and
                # the ranking holds a request to the time its client waits.
                deadline = Deadline.from_headers(time.perf_counter, config.request_timeout_s,
                                                 request.headers, stream=chat.stream)
                prepared = await prepare_off_loop(pipeline, chat, raw, request.headers,
                                                  deadline.expires_at, caller)
            except Exception as exc:
                return error_response(exc)
            return Response(orjson.dumps(explain_decision(prepared, config.model_facts)),
                            media_type="application/json")

    return explain
