"""`policy check`: the CI gate that no task can be routed to a model below its quality floor.

Pure: walks every task policy (and the default), every candidate, fallback and no-candidate
fallback model, and reports each model whose eval lower bound is under the floor, and each
floor that has no eval behind it; and warns of what can never work as written (a risk rule
leaving a task no model, an arm under a floor, a cost ceiling no deployment can meet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from policies.eligibility import (
    DeploymentFacts,
    RequestFacts,
    Role,
    floor_check,
    worst_case_cost,
)
from policies.eval_report import QualityTable
from policies.experiments.schema import LatencyGuardrail
from policies.labels import TASKS, Task
from policies.schema import PoliciesSpec, RouterConfig, TaskPolicy


@dataclass(frozen=True, slots=True)
class Violation:
    task: str
    model: str
    role: Role
    reason: str

    def __str__(self) -> str:
        return f"task {self.task}: {self.role} model {self.model}: {self.reason}"


def _models(policy: TaskPolicy) -> list[tuple[str, Role]]:
    """Every model the policy may route to, with the part of it that names the model."""
    models = [(m, Role.CANDIDATE) for m in policy.candidates]
    models += [(m, Role.FALLBACK) for m in policy.fallbacks]
    if policy.no_candidate_fallback is not None:
        models.append((policy.no_candidate_fallback, Role.NO_CANDIDATE_FALLBACK))
    return models


def _policy_violations(task: Task, label: str, policy: TaskPolicy,
                       quality: QualityTable) -> list[Violation]:
    found = []
    for model, role in _models(policy):
        check = floor_check(policy.quality_floor, model, task, quality)
        if not check.passed:
            found.append(Violation(label, model, role, check.detail))
    return found


def check_policies(config: RouterConfig, quality: QualityTable) -> list[Violation]:
    """Every (task, model) pair a policy may route to whose floor is not backed by an eval."""
    if config.policies is None:
        return []
    found = []
    for task in TASKS:
        explicit = task in config.policies.tasks
        label = task if explicit else f"{task} (default policy)"
        found += _policy_violations(task, label, config.policies.for_task(task), quality)
    return found


def _no_e2e_target(policy: TaskPolicy) -> bool:
    """A `min_cost` policy with TTFT or TPOT targets and no E2E one (`policy_warnings`)."""
    slo = policy.slo
    return (policy.objective == "min_cost" and slo.e2e_p99_ms is None
            and (slo.ttft_p95_ms is not None or slo.tpot_p95_ms is not None))


def policy_warnings(config: RouterConfig, quality: QualityTable) -> list[str]:
    """What the config allows but can never work as written (reported, not failed on):
    a risk rule that leaves a task none of its models, or requires zero data retention of
    models none of whose deployments has it, so its requests of that risk level have no
    route; an experiment arm whose model is under a task's floor, so its requests are all
    answered by control's route (`x-slorouter-arm-degraded`); a `min_cost` task with latency
    targets but no `e2e_p99_ms`, which holds its non-streamed requests to no latency target;
    `routes.by_task` or `routes.default_model` beside a policies section, which routes every
    task instead; an empty `routes.aliases` beside one, which leaves it nothing to route; and,
    with or without policies, figures in the wrong unit and cache rules no backend serves."""
    if config.policies is None:
        return _implausible_units(config) + _cache_rules_unused(config)
    retaining_nothing = _models_with_zero_retention(config)
    found = []
    if config.routes.by_task:
        found.append("routes.by_task is not used: with a policies section every task is routed "
                     "by its policy (give the task a policy with those candidates instead)")
    if config.routes.default_model is not None:
        found.append("routes.default_model is not used: with a policies section every task is "
                     "routed by its policy (the default policy serves the tasks no other names)")
    if not config.routes.aliases:
        found.append("routes.aliases is empty: no model name routes by policy, so no request "
                     "is routed by the policies (each must name a model); list `auto` there")
    untimed = [task for task in TASKS if _no_e2e_target(config.policies.for_task(task))]
    if untimed:  # one line: a default without the target would repeat it for every task
        which = (f"task {untimed[0]}" if len(untimed) == 1
                 else "every task" if len(untimed) == len(TASKS)
                 else "tasks " + ", ".join(untimed))
        found.append(f"{which}: min_cost with TTFT/TPOT targets but no e2e_p99_ms: its "
                     "non-streamed requests are held to no latency target and go to the "
                     "cheapest healthy model (a non-streamed answer's first token is the "
                     "whole answer); set e2e_p99_ms")
    for task in TASKS:
        policy = config.policies.for_task(task)
        models = {model for model, _ in _models(policy)}
        for risk, rule in sorted(policy.risk.items()):
            allowed = models if rule.candidates is None else models & set(rule.candidates)
            if not allowed:
                found.append(f"task {task}: its {risk}-risk rule allows only "
                             f"{', '.join(rule.candidates or ())}, none of the task's models: "
                             f"its {risk}-risk requests have no route")
            elif rule.require_zero_data_retention and not allowed & retaining_nothing:
                found.append(f"task {task}: its {risk}-risk rule requires zero data retention, "
                             f"which no deployment of {', '.join(sorted(allowed))} has: its "
                             f"{risk}-risk requests have no route (503 no_eligible_model)")
    found += _not_inherited(config.policies)
    found += _implausible_units(config)
    found += _fixture_backed(config, quality)
    found += _cache_rules_unused(config)
    for experiment in config.experiments:
        for arm in experiment.arms:
            if not arm.route.startswith("model:"):
                continue
            model = arm.route.removeprefix("model:")
            for task in experiment.tasks:
                check = floor_check(config.policies.for_task(task).quality_floor, model, task,
                                    quality)
                if not check.passed:
                    found.append(f"experiment {experiment.name}: arm {arm.name}: model {model} "
                                 f"is under task {task}'s floor ({check.detail}): control's "
                                 "route answers all its requests")
    return found


# Settings of `default` a task policy does not take over when it leaves them out (only the risk
# rules and the cost ceiling are inherited, `PoliciesSpec`) and that a task rarely means to
# drop (its fallbacks and cache rule are its own: not warned of).
_NOT_INHERITED = ("require_idempotency_key", "timeout_s", "slo")


def _not_inherited(policies: PoliciesSpec) -> list[str]:
    """A task policy that leaves out settings `default` sets: a request classified (or hinted)
    as that task is not held to them, which reads as inheritance and is not (the
    misconfiguration audit of 2026-12-06: an `Idempotency-Key` required under `default` was
    escaped with `x-slorouter-task: code`)."""
    default, found = policies.default, []
    for task, policy in policies.tasks.items():
        missed = [name for name in _NOT_INHERITED
                  if name in default.model_fields_set and name not in policy.model_fields_set
                  and getattr(default, name) != getattr(policy, name)]
        if missed:
            found.append(f"task {task}: its policy does not set {', '.join(missed)}, which "
                         f"default sets: a task policy takes over only default's risk rules and "
                         f"max_cost_per_request_usd, so {task} requests are not held to "
                         f"default's {', '.join(missed)}; set them on the task")
    return found


# Below these a latency target (or a guardrail's `max_ms`) reads as seconds written where
# milliseconds are meant.
_LEAST_PLAUSIBLE_MS = {"ttft_p95_ms": 20.0, "e2e_p99_ms": 20.0, "tpot_p95_ms": 1.0}
_LEAST_PLAUSIBLE_GUARDRAIL_MS = 20.0
# Below this many tokens a context window reads as thousands (`128` for 128k).
_LEAST_PLAUSIBLE_WINDOW = 1024
# Below this many bytes no chat request fits (`4` for 4 MB).
_LEAST_PLAUSIBLE_BODY = 1024


def _implausible_units(config: RouterConfig) -> list[str]:
    """Figures that cannot be what was meant: latency targets and latency guardrails in
    seconds, an E2E target below the TTFT one (never met), a body limit no chat request fits,
    a context window in thousands, which takes the deployment out of every request over it (the
    misconfiguration audit)."""
    found = []
    policies = config.policies
    named = ([("default", policies.default), *policies.tasks.items()]
             if policies is not None else [])
    for name, policy in named:
        slo = policy.slo
        for field, least in _LEAST_PLAUSIBLE_MS.items():
            value = getattr(slo, field)
            if value is not None and value < least:
                found.append(f"{_policy_path(name)}.slo.{field}: {value:g} ms: targets are in "
                             f"milliseconds ({value:g} s is {value * 1000:g})")
        if slo.e2e_p99_ms is not None and slo.ttft_p95_ms is not None and \
                slo.e2e_p99_ms < slo.ttft_p95_ms:
            found.append(f"{_policy_path(name)}.slo: e2e_p99_ms ({slo.e2e_p99_ms:g}) is below "
                         f"ttft_p95_ms ({slo.ttft_p95_ms:g}): a whole answer comes after its "
                         "first token, so the E2E target is never met")
    for experiment in config.experiments:
        for guardrail in experiment.guardrails:
            if isinstance(guardrail, LatencyGuardrail) and \
                    guardrail.max_ms < _LEAST_PLAUSIBLE_GUARDRAIL_MS:
                found.append(f"experiments.{experiment.name}: guardrail {guardrail.kind} "
                             f"max_ms {guardrail.max_ms:g}: in milliseconds, it halts the "
                             f"treatment on any answer slower ({guardrail.max_ms:g} s is "
                             f"{guardrail.max_ms * 1000:g})")
    if config.server.max_body_bytes < _LEAST_PLAUSIBLE_BODY:
        found.append(f"server.max_body_bytes: {config.server.max_body_bytes} bytes: every "
                     "chat request is larger (413); the limit is in bytes")
    for deployment in config.deployments:
        window = deployment.context_window
        if window is not None and window < _LEAST_PLAUSIBLE_WINDOW:
            found.append(f"deployments.{deployment.name}.context_window: {window} tokens: "
                         f"every request over it skips the deployment (in thousands, "
                         f"{window}k is {window * 1000})")
    return found


def _cache_rules_unused(config: RouterConfig) -> list[str]:
    """`server.cache.backend: none` turns every cache rule off, silently: the policies' and
    `server.cache.default` (pinned models', and every request's without policies)."""
    if config.server.cache.backend != "none":
        return []
    caching = ["server.cache.default"] if config.server.cache.default.enabled else []
    policies = config.policies
    if policies is not None:
        named = [("default", policies.default), *policies.tasks.items()]
        caching += [_policy_path(name) for name, policy in named if policy.cache.enabled]
    if not caching:
        return []
    return [f"server.cache.backend is none: {', '.join(caching)} cache.enabled is not used "
            "(no answer is cached); choose backend disk or redis, or drop the rule"]


def _policy_path(name: str) -> str:
    return "policies.default" if name == "default" else f"policies.tasks.{name}"


def _fixture_backed(config: RouterConfig, quality: QualityTable) -> list[str]:
    """The floors a `method: fixture` row backs (a hand-written result: its bound is taken as
    written, never checked against its mean and n), one line per (model, task, metric)."""
    assert config.policies is not None
    found = []
    for task in TASKS:
        policy = config.policies.for_task(task)
        floor = policy.quality_floor
        if floor is None:
            continue
        judged = {model for model, _ in _models(policy)} | (
            {floor.relative_to} if floor.relative_to is not None else set())
        for model in sorted(judged):
            result = quality.get(model, task, floor.metric)
            if result is not None and result.method == "fixture":
                found.append(f"task {task}: {model}'s {floor.metric} is a fixture row (method: "
                             f"fixture, lower {result.lower:g} as written, never checked "
                             "against its mean and n): its floor is backed by no measurement; "
                             "run `slorouter eval run` for one")
    return found


def ended_experiments(config: RouterConfig, now: datetime) -> list[tuple[str, datetime]]:
    """(name, stop) of the experiments whose `stop` has passed: they load but assign no
    request (no `x-slorouter-arm`), which looks like a broken experiment."""
    return [(spec.name, spec.stop) for spec in config.experiments
            if spec.stop is not None and spec.stop <= now]


def _models_with_zero_retention(config: RouterConfig) -> set[str]:
    """Models with at least one deployment marked `zero_data_retention`."""
    retaining_nothing = {d.name for d in config.deployments if d.zero_data_retention}
    return {m.name for m in config.models if retaining_nothing & set(m.deployments)}


def ceiling_warnings(config: RouterConfig, model_facts: Mapping[str, Sequence[DeploymentFacts]],
                     minimal_prompt_tokens: int, default_output_tokens: int) -> list[str]:
    """Cost ceilings that refuse every request (400 `over_cost_ceiling`): under the cheapest
    deployment of the policy's models for a minimal request (`minimal_prompt_tokens`, one
    output token), or, short of that, for one that sets no output limit (priced at
    `default_output_tokens`, as eligibility prices it). The default policy is judged once,
    when some task falls to it."""
    if config.policies is None:
        return []
    named = [(f"task {task}", policy) for task, policy in config.policies.tasks.items()]
    if set(TASKS) - set(config.policies.tasks):
        named.append(("default policy", config.policies.default))
    found = []
    for label, policy in named:
        ceiling = policy.max_cost_per_request_usd
        deployments = [d for model, _ in _models(policy) for d in model_facts.get(model, ())]
        if ceiling is None or not deployments:
            continue
        cases = ((1, f"the smallest request ({minimal_prompt_tokens} prompt tokens, 1 output "
                     "token)", "every request is refused"),
                 (default_output_tokens, f"a request that sets no output limit (priced at "
                  f"{default_output_tokens} output tokens)", "every request without max_tokens "
                  "or max_completion_tokens is refused"))
        for output_tokens, request, refused in cases:
            facts = RequestFacts(task=TASKS[0], risk="low", prompt_tokens=minimal_prompt_tokens,
                                 max_output_tokens=output_tokens)
            cost, cheapest = min((worst_case_cost(facts, d), d.name) for d in deployments)
            if cost > ceiling:
                found.append(f"{label}: max_cost_per_request_usd ${ceiling:g} is under the "
                             f"cheapest deployment's cost for {request}: ${cost:.6f} "
                             f"({cheapest}): {refused} (400 over_cost_ceiling)")
                break
    return found
