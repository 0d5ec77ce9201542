"""Deciding where a request goes: requested name → policy → ordered deployments (pure).

A configured model name is pinned: its deployments, in order (with
`policies.enforce_risk_rule_on_pinned_requests`, those its task's risk rule allows), those the
ranker expects to meet the task's SLO (availability at least) before the others. The
routing alias (`auto`) goes through the task's policy when the configuration has `policies`
(eligibility by floor, risk, fit, health and budget; then a `Ranker` orders the eligible
deployments), else through the simple per-task default table. No I/O: statistics and health
come in as values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

from policies.eligibility import (
    UNFIT_FIELD,
    Check,
    CheckName,
    DeploymentFacts,
    RequestFacts,
    Role,
    Verdict,
    asks_droppable,
    dropped_field,
    evaluate,
    pinned_verdicts,
    refuses_stop,
    too_hot,
    worst_case_cost,
)
from policies.learned.decide import ThresholdRule, choose_available
from policies.schema import TaskPolicy
from router.classify.types import Labels
from router.errors import NoEligibleModelError, NotFoundError, RequestError, shown
from router.runtime_config import RuntimeConfig

Health = Callable[[str], bool]


class Ranked(NamedTuple):
    """One deployment's place in a ranker's order: its score, why, whether the ranker put it
    there to explore (keep its estimates fresh) rather than because it ranked best, and whether
    it is expected to meet the task's SLO targets (rankers without statistics cannot tell)."""

    deployment: str
    score: float
    why: str
    explored: bool = False
    meets_slo: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    requested: str
    model: str
    deployments: tuple[str, ...]  # in the order they are tried
    pinned: bool
    policy_version: str
    reason: str
    verdicts: tuple[Verdict, ...] = ()
    ranking_detail: tuple[Ranked, ...] = ()
    restricted: bool = False  # an experiment arm's model restriction was applied
    explored: bool = False  # the first deployment is an exploration probe, not the best ranked
    risk_rule_applied: bool = False  # pinned, and held to the task's risk rule all the same
    # The arm's model was passed over because the policy does not let it serve this request
    # (its floor, the risk rule, fit, the cost ceiling), not because it is down: no arm failure.
    arm_ineligible: bool = False


# The reason a ranker gives first, for people reading it, to a deployment it explores.
EXPLORED = "explored"


class Ranker(Protocol):
    """Orders eligible deployments for a policy (scoring by latency and cost lives behind it)."""

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]: ...


class StaticRanker:
    """Without latency statistics: cheapest first (`min_cost`, `weighted`), else policy order."""

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        if policy.objective == "min_latency":
            return tuple(Ranked(v.deployment, float(-i), "policy order")
                         for i, v in enumerate(eligible))
        ordered = sorted(eligible, key=lambda v: v.cost_usd)
        return tuple(Ranked(v.deployment, -v.cost_usd, f"worst-case cost ${v.cost_usd:.6f}")
                     for v in ordered)


# Checks a request fails by itself (its size, its needs, its worst-case cost): no retry helps.
_REQUEST_CHECKS = frozenset({CheckName.FITS, CheckName.BUDGET})


def require_route(decision: Decision,
                  soonest_probe_s: Callable[[Iterable[str]], float] | None = None, *,
                  tools_field: str = "tools", budget_field: str = "max_tokens") -> Decision:
    """A decision with nothing to try is an error that says why, per deployment: a 400 when the
    request itself fits no candidate (too long, needs tools or JSON mode none offers, over the
    cost ceiling everywhere a model above the floor is: retrying cannot help) or when it names
    a model whose deployments the risk rule all refuse for it (the caller's choice: `auto` or
    another model may serve it), else a 503 (the policy says reject), with a Retry-After when
    open circuits are among the reasons: `soonest_probe_s` of the deployments they hold (the
    breakers' own time, as a pinned request's `circuit_open` says it), else 1 s, spread as
    `circuit_open`'s is (`spread_retry_after`: never sooner than that).
    `no_model_fits` names the field no candidate could take (`messages` for the length,
    `tools_field` for tools, `response_format`) when they all failed on the same one;
    `over_cost_ceiling` names `budget_field`, what makes the request cost that much (`n`, its
    output limit, or `messages`)."""
    if decision.deployments:
        return decision
    failed = [(v.deployment, [c for c in v.checks if not c.passed]) for v in decision.verdicts
              if not v.eligible]
    why = "; ".join(f"{name}: {', '.join(c.detail for c in checks)}"
                    for name, checks in failed[:6])
    message = decision.reason + (f" [{why}]" if why else "") + "; POST /v1/route/explain shows why"
    if decision.risk_rule_applied:  # pinned: the risk rule is the only check it was held to
        raise RequestError(message, param="model", code="model_not_allowed_for_risk")
    # A model under the task's floor serves none of its requests: it says nothing of whether
    # this request is why the others cannot (it turned an over-ceiling request into a 503).
    servable = [(name, checks) for name, checks in failed
                if not any(c.name == CheckName.FLOOR for c in checks)]
    if servable and all(any(c.name in _REQUEST_CHECKS for c in checks)
                        for _, checks in servable):
        only_budget = all(all(c.name == CheckName.BUDGET
                              for c in checks if c.name in _REQUEST_CHECKS)
                          for _, checks in servable)
        if only_budget:
            raise RequestError(message, param=budget_field, code="over_cost_ceiling")
        raise RequestError(message, param=_unfit_field(servable, tools_field),
                           code="no_model_fits")
    held = [name for name, checks in failed if any(c.name == CheckName.HEALTHY for c in checks)]
    retry_after = None if not held else (
        soonest_probe_s(held) if soonest_probe_s is not None else 1.0)
    raise NoEligibleModelError(message, code="no_eligible_model", retry_after=retry_after,
                               spread_retry_after=True)


def _unfit_field(failed: Sequence[tuple[str, Sequence[Check]]], tools_field: str) -> str:
    """The request field every candidate's failed `fits` check blames; `messages` when they
    differ (or a candidate failed only its cost ceiling)."""
    fields = {UNFIT_FIELD.get(c.template, "messages") if c.name == CheckName.FITS else "messages"
              for _, checks in failed for c in checks if c.name in _REQUEST_CHECKS}
    field = fields.pop() if len(fields) == 1 else "messages"
    return tools_field if field == "tools" else field


def unknown_model(requested: str) -> NotFoundError:
    """The 404 for a model name this router does not serve (a long name is cut in the message)."""
    return NotFoundError(f"The model '{shown(requested, 100)}' does not exist; GET /v1/models "
                         "lists the names this router serves", param="model",
                         code="model_not_found")


def facts_by_model(config: RuntimeConfig,
                   health: Health) -> dict[str, tuple[DeploymentFacts, ...]]:
    """The configured facts, with deployments whose circuit is open marked unhealthy."""
    return {model: tuple(f if health(f.name) else replace(f, healthy=False) for f in facts)
            for model, facts in config.model_facts.items()}


def decide(requested: str, labels: Labels, facts: RequestFacts, config: RuntimeConfig,
           ranker: Ranker, health: Health, restrict_to: str | None = None) -> Decision:
    """`restrict_to` (an experiment arm's model) narrows the policy's candidates to one model;
    when that model does not qualify, the policy as written decides."""
    if requested in config.models:
        return _pinned(requested, facts, config, ranker)
    if requested not in config.aliases:
        raise unknown_model(requested)
    policies = config.source.policies
    if policies is None:
        model = config.model_by_task.get(labels.task, config.default_model)
        if model is None:  # never: the loader requires default_model without policies
            raise unknown_model(requested)
        return Decision(requested, model, _able(model, facts, config, config.models[model]),
                        False, config.version, f"per-task default for {labels.task}")
    policy = policies.for_task(labels.task)
    restricted = arm_ineligible = False
    if restrict_to is not None:
        narrowed = (config.arm_policies.get((labels.task, restrict_to))
                    or policy.narrowed_to(restrict_to))
        arm = evaluate(narrowed, facts, facts_by_model(config, health), config.quality)
        if any(v.eligible for v in arm):
            policy, restricted = narrowed, True
        else:
            arm_ineligible = not any(_only_unhealthy(v) for v in arm)
    verdicts = evaluate(policy, facts, facts_by_model(config, health), config.quality)
    eligible = [v for v in verdicts if v.eligible]
    if not eligible:
        return _no_candidate(requested, labels, facts, policy, verdicts, config,
                             arm_ineligible)
    # A deployment shared by two candidate models is ranked and tried once: the retry limit is
    # per deployment, and a hedge never races one against itself. (A model listed twice among
    # the candidates is refused at load.)
    ranked = ranker.rank(policy, facts,
                         _first_per_deployment(v for v in eligible if v.role == Role.CANDIDATE))
    ranked = _learned_first(policy, facts, eligible, ranked, config)
    order = [r.deployment for r in ranked]
    fallbacks = _first_per_deployment(v for v in eligible if v.role == Role.FALLBACK)
    order += [v.deployment for v in fallbacks if v.deployment not in order]
    first = next(v.model for v in eligible if v.deployment == order[0]) if order else ""
    explored = bool(ranked) and ranked[0].explored
    return Decision(requested, first, tuple(order), False, config.version,
                    f"policy for {labels.task}: {policy.objective}", verdicts, ranked, restricted,
                    explored, arm_ineligible=arm_ineligible)


def _only_unhealthy(verdict: Verdict) -> bool:
    """The deployment fails its open circuit alone: the policy would let it serve the request."""
    return all(c.name == CheckName.HEALTHY for c in verdict.checks if not c.passed)


def _pinned(requested: str, facts: RequestFacts, config: RuntimeConfig,
            ranker: Ranker) -> Decision:
    """The named model's deployments: all of them, or with
    `enforce_risk_rule_on_pinned_requests` those the task's risk rule allows (possibly none);
    in their order, but those expected to meet the SLO first (`_meeting_first`)."""
    policies = config.source.policies
    if policies is None or not policies.enforce_risk_rule_on_pinned_requests:
        allowed = _able(requested, facts, config, config.models[requested])
        ranked = _rank_replicas(requested, allowed, facts, config, ranker)
        return Decision(requested, requested, _meeting_first(allowed, ranked), True,
                        config.version, "pinned by the request", ranking_detail=ranked)
    verdicts = pinned_verdicts(policies.for_task(facts.task), facts,
                               config.model_facts[requested])
    allowed = _able(requested, facts, config,
                    tuple(v.deployment for v in verdicts if v.eligible))
    reason = ("pinned by the request; risk rule met" if allowed else
              f"the risk rule of task {facts.task} allows no deployment of model {requested!r} "
              f"for risk {facts.risk} (pinned requests are held to it); use 'auto' or a model "
              "it allows")
    ranked = _rank_replicas(requested, allowed, facts, config, ranker)
    return Decision(requested, requested, _meeting_first(allowed, ranked), True,
                    config.version, reason, verdicts, ranked, risk_rule_applied=True)


# The SLO a pinned request is held to when the configuration has no policies: availability
# (`SloSpec`'s default), no latency target. Built once: rankers cache settings per policy.
_NO_POLICY = TaskPolicy(candidates=("pinned",))


def _rank_replicas(model: str, deployments: tuple[str, ...], facts: RequestFacts,
                   config: RuntimeConfig, ranker: Ranker) -> tuple[Ranked, ...]:
    """A pinned model's replicas as the ranker sees them under the task's SLO, when there is a
    choice. Pinning skips every policy check; it does not make a replica that keeps failing
    (or misses the task's latency target) as good as its healthy peers: ordered by prefix
    affinity alone, a replica failing 30% of its calls kept half the traffic, and its retries
    spent the retry budget the other tenants' requests needed."""
    if len(deployments) < 2:
        return ()
    policies = config.source.policies
    policy = policies.for_task(facts.task) if policies is not None else _NO_POLICY
    known = {d.name: d for d in config.model_facts[model]}
    replicas = [Verdict(model, name, Role.PINNED, (), worst_case_cost(facts, known[name]))
                for name in deployments]
    return ranker.rank(policy, facts, replicas)


def _meeting_first(deployments: tuple[str, ...], ranked: Sequence[Ranked]) -> tuple[str, ...]:
    """`deployments` in their order, those `ranked` as meeting the SLO before the others (all
    as they were when none or all meet it), and the ranker's exploration probe first when it
    is one of the others: as under a policy, a replica left behind is probed so that it can win
    its traffic back once it recovers (+27 s against +52 s without probes). A probe of a replica
    that meets the SLO changes nothing: healthy replicas keep their configured order."""
    meeting = {r.deployment for r in ranked if r.meets_slo}
    probe = (ranked[0].deployment if ranked and ranked[0].explored and not ranked[0].meets_slo
             else None)
    if probe is None and (not meeting or len(meeting) == len(deployments)):
        return deployments
    return (*(d for d in deployments if d == probe),
            *(d for d in deployments if d in meeting and d != probe),
            *(d for d in deployments if d not in meeting and d != probe))


def _able(model: str, facts: RequestFacts, config: RuntimeConfig,
          deployments: tuple[str, ...]) -> tuple[str, ...]:
    """Of a pinned (or per-task default) model's `deployments`, those that take the request's
    tools, JSON mode, temperature and stop sequences, when any does: a replica configured
    without them is not chosen (prefix affinity would pick it as readily as the others) while
    one with them can serve. When none does, all of them, in order: such a request is served by
    its model as asked (a temperature or stop sequence its provider refuses comes back as that
    provider's 400).
    A request for `n` > 1 choices, log probabilities, legacy functions or a JSON mode goes only
    to those that answer them (`dropped_field`): another would answer one choice, no log
    probabilities, or prose, with a 200, as litellm drops such fields for providers that take
    none. When none of them does, the request is refused (400 naming the field) rather than
    answered short."""
    if asks_droppable(facts) and deployments:
        deployments = _answering(model, facts, config, deployments)
    if not (facts.needs_tools or facts.needs_json or facts.temperature is not None
            or facts.blank_stop) or len(deployments) < 2:
        return deployments
    unable = {d.name for d in config.model_facts[model]
              if (facts.needs_tools and not d.supports_tools)
              or (facts.needs_json and not d.supports_json) or too_hot(facts, d)
              or refuses_stop(facts, d)}
    able = tuple(d for d in deployments if d not in unable)
    return able if able else deployments


def _answering(model: str, facts: RequestFacts, config: RuntimeConfig,
               deployments: tuple[str, ...]) -> tuple[str, ...]:
    """The `deployments` of `model` that answer what the request asks that an adapter may drop
    (`dropped_field`); a 400 naming the field the first of them would drop when none does."""
    known = {d.name: d for d in config.model_facts[model]}
    dropped = [dropped_field(facts, known[name]) for name in deployments]
    able = tuple(name for name, field in zip(deployments, dropped, strict=True) if field is None)
    if able:
        return able
    field = dropped[0]
    assert field is not None
    raise RequestError(
        f"model {model!r} cannot answer {_ASKED[field](facts)}: its deployments' providers "
        f"(or their adapter) take no {field}, so the answer would come back without it; ask "
        f"without {field}, or name a model that takes it",
        param="messages" if field == "input_audio" else field, code="no_model_fits")


_ASKED: dict[str, Callable[[RequestFacts], str]] = {
    "n": lambda facts: f"{facts.completions} choices",
    "logprobs": lambda _: "log probabilities",
    "functions": lambda _: "with legacy functions",
    "response_format": lambda facts: ("a json_object response_format" if facts.json_object
                                      else "a json_schema response_format beside tools"),
    "tools": lambda _: "with tools",
    "tool_choice": lambda _: "with a tool_choice",
    "stop": lambda _: "with stop sequences",
    "input_audio": lambda _: "with input_audio content",
    "modalities": lambda _: "with audio output",
}


def _first_per_deployment(verdicts: Iterable[Verdict]) -> list[Verdict]:
    firsts: dict[str, Verdict] = {}
    for verdict in verdicts:
        firsts.setdefault(verdict.deployment, verdict)
    return list(firsts.values())


def _learned_first(policy: TaskPolicy, facts: RequestFacts, eligible: Sequence[Verdict],
                   ranked: tuple[Ranked, ...], config: RuntimeConfig) -> tuple[Ranked, ...]:
    """With a learned router trained for the request's task: the cheapest model predicted to
    clear the floor goes first (other tasks keep the policy's ranking: the router was never
    calibrated on them)."""
    router = config.learned.get(policy.learned_router) if policy.learned_router else None
    if router is None or not facts.prompt_text or facts.task not in router.tasks:
        return ranked
    candidates = {v.model for v in eligible if v.role == Role.CANDIDATE}
    if not router.predictor.featurizer.familiar(facts.prompt_text):
        # Unlike every training prompt, its predictions say nothing: the model calibration
        # held the floor against goes first when the policy lets it, else the policy's order.
        reference = router.rule.fallback
        if reference not in candidates:
            return ranked
        return _moved_first(ranked, eligible, reference,
                            "learned router: prompt unlike its training data, its reference")
    probs = router.predictor.predict(facts.prompt_text, facts.task)
    # Among the policy's eligible candidates (what `ranked` holds; its fallbacks are tried after
    # every candidate whatever the router predicts): the rule's pick when it is one, else its
    # fallback, else the most likely to succeed. An unavailable pick used to leave the policy's
    # own order, the cheapest model first, for the very prompts the rule sent to a strong one;
    # so did a pick among the policy's fallbacks (the learned-routing audit of 2026-12-07: a
    # model calibration had ruled out served two thirds of the prompts first).
    chosen = choose_available(by_configured_cost(router.rule, eligible), probs, candidates)
    if chosen is None:
        return ranked
    return _moved_first(ranked, eligible, chosen,
                        f"learned router: P(success)={probs.get(chosen, 0.0):.2f} for {chosen}")


def _moved_first(ranked: tuple[Ranked, ...], eligible: Sequence[Verdict], model: str,
                 note: str) -> tuple[Ranked, ...]:
    """`ranked` with `model`'s deployments first, each noting why."""
    front = [r._replace(why=f"{r.why}; {note}") for r in ranked
             if any(v.deployment == r.deployment and v.model == model for v in eligible)]
    moved = {r.deployment for r in front}
    return (*front, *[r for r in ranked if r.deployment not in moved])


def by_configured_cost(rule: ThresholdRule, eligible: Sequence[Verdict]) -> ThresholdRule:
    """`rule` with its candidates cheapest first by this request's worst case on the configured
    prices (each model at its cheapest eligible deployment; a model with none last), not by the
    prices of the data it was trained on: a model whose configured price is twenty times its
    training price must not come first. Equal costs keep the trained order."""
    cheapest: dict[str, float] = {}
    for verdict in eligible:
        if verdict.cost_usd < cheapest.get(verdict.model, math.inf):
            cheapest[verdict.model] = verdict.cost_usd
    order = sorted(rule.candidates, key=lambda model: cheapest.get(model, math.inf))
    return rule if tuple(order) == rule.candidates else replace(rule, candidates=tuple(order))


def _no_candidate(requested: str, labels: Labels, facts: RequestFacts, policy: TaskPolicy,
                  verdicts: tuple[Verdict, ...], config: RuntimeConfig,
                  arm_ineligible: bool = False) -> Decision:
    """The policy's `no_candidate_fallback` when none qualified: it is spared the health check
    only (its own open circuit is the runner's to skip, with a Retry-After). The quality floor,
    the risk rule (allowed models, zero data retention), fit and the cost ceiling hold for it
    as for any candidate: a fallback is a way to keep serving, never a way around them.
    `arm_ineligible` is carried to the decision as `decide` found it: a request no model may
    serve (one too long for every window, say) says nothing of an experiment arm the policy
    also bars from it, and must not count as that arm's failure."""
    fallback = policy.no_candidate_fallback
    allowed: tuple[str, ...] = ()
    if fallback is not None:
        as_candidate = policy.narrowed_to(fallback)
        judged = tuple(replace(v, role=Role.NO_CANDIDATE_FALLBACK) for v in evaluate(
            as_candidate, facts, {fallback: config.model_facts.get(fallback, ())},
            config.quality))
        verdicts += judged
        allowed = tuple(v.deployment for v in judged
                        if all(c.passed for c in v.checks if c.name != CheckName.HEALTHY))
    if not allowed:
        return Decision(requested, "", (), False, config.version,
                        f"no model may serve task {labels.task} under its policy (every "
                        "candidate failed its quality floor, risk, fit, health or budget check)",
                        verdicts, arm_ineligible=arm_ineligible)
    return Decision(requested, fallback or "", allowed, False, config.version,
                    f"no candidate qualified for {labels.task}: no_candidate_fallback",
                    verdicts, arm_ineligible=arm_ineligible)
