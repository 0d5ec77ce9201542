"""The request path between the HTTP layer and the execution layer.

`ChatPipeline.prepare` runs the steps before the upstream call and records their timings:
`measure` (classify, estimate: the request alone, so a long prompt's may run off the event
loop) and `route` (decide, plan: reads the statistics the loop keeps); `complete` and
`open_stream` hand the plan to the execution layer. The HTTP layer owns
the wire format and the client connection; this module never touches either.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from cache.prefix import cache_salt, client_prompt_cache_key, writes_for_an_hour
from policies.eligibility import RequestFacts, output_cap
from policies.experiments import Assignment, UnitIds
from policies.labels import RISKS, TASKS, Risk, Task
from policies.schema import TaskPolicy
from router.api.schemas import ChatCompletionRequest, FunctionTool
from router.classify.detectors import visible
from router.classify.types import Classifier, Hints, Labels, RequestView
from router.decide import Decision, Health, Ranker, StaticRanker, decide, require_route
from router.errors import ECHOED_CHARS, RequestError, shown
from router.execution.deadline import head_timeout_s
from router.execution.hedging import (
    NO_DEPLOYMENT,
    NO_POLICY,
    NO_STATISTICS,
    HedgeInputs,
    HedgePlan,
    plan_hedge,
    refusal_before_prediction,
)
from router.execution.plan import CommittedStream, Plan, first_content_by
from router.execution.runner import Runner
from router.media_tokens import MEDIA_PARTS, media_part_tokens
from router.outcomes import Outcome
from router.prefix import affinity_order, marked_bodies
from router.providers.base import Completion, Deployment
from router.runtime_config import RuntimeConfig
from router.token_estimate import text_tokens, utf8_tokens

HedgeDelay = Callable[[str, Task, int, bool], float | None]  # deployment, task, prompt, stream
# (task, units): the unit's arm, nothing recorded yet.
AssignArm = Callable[[Task, UnitIds], Assignment | None]
# (assignment, units): remember the request's arm for its feedback (its route answers it).
ExposeArm = Callable[[Assignment, UnitIds], None]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent the request, as far as routing cares (tenant, ids for experiment units)."""

    tenant: str = "default"
    request_id: str = "-"
    user: str | None = None
    session: str | None = None
    explaining: bool = False  # an explanation: decided as the request would be, nothing recorded
    risk_hints_may_lower: bool = True  # the key's `risk_hints`: False for `raise_only`
    scopes: tuple[str, ...] = ()  # the key's permission scopes

    def units(self) -> UnitIds:
        return UnitIds(request=self.request_id, tenant=self.tenant, user=self.user,
                       session=self.session)

    def prefix_partition(self) -> str:
        """Whose prompt prefixes may share a provider's prefix cache (and a replica's KV
        cache): one tenant's callers with the same permission scopes, as for stored answers.
        A caller with fewer scopes would otherwise learn, from `cached_tokens` or a faster first
        token, that a caller with more sent exactly that prefix."""
        return prefix_partition_of(self.tenant, self.scopes)

# An attempt that waits this many times its task's latency target without an answer has
# stalled, whoever's deadline then cuts it (`Plan.stall_after_s`).
STALL_TARGET_MULTIPLE = 2.0

# Output tokens assumed for fit and cost checks when the request sets no limit.
DEFAULT_MAX_OUTPUT_TOKENS = 512

# Fields of the client body that are the router's, not the provider's. (`stream_options` goes
# on: the adapters add `include_usage` to a stream's and drop it from a whole answer's call.)
_ROUTER_FIELDS = frozenset({"model", "stream"})
# `metadata` keys that are the router's whatever their value (`provider_tags`)
_ROUTER_METADATA = frozenset({"data_version", "session_id"})


@dataclass(slots=True)
class Phases:
    """Durations in seconds of the phases shown in `server-timing`."""

    classify: float = 0.0
    decide: float = 0.0
    cache: float = 0.0

    def header(self, upstream_ttft: float | None, total: float | None) -> str:
        parts = [f"classify;dur={self.classify * 1e3:.3f}", f"decide;dur={self.decide * 1e3:.3f}",
                 f"cache;dur={self.cache * 1e3:.3f}"]
        if upstream_ttft is not None:
            parts.append(f"upstream_ttft;dur={upstream_ttft * 1e3:.3f}")
        if total is not None:
            parts.append(f"total;dur={total * 1e3:.3f}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Measured:
    """A request classified and measured, not yet routed (`ChatPipeline.measure`)."""

    request: ChatCompletionRequest
    raw: Mapping[str, Any]
    caller: Caller
    labels: Labels
    facts: RequestFacts
    policy: TaskPolicy | None  # the task's policy, when the config has policies
    deadline: float  # shortened to the policy's `timeout_s`
    head_deadline: float | None  # a stream's first token, from the SDK's timeout headers
    phases: Phases


@dataclass(slots=True)
class Prepared:
    request: ChatCompletionRequest
    labels: Labels
    decision: Decision
    plan: Plan
    facts: RequestFacts
    phases: Phases = field(default_factory=Phases)

    policy: TaskPolicy | None = None  # the task's policy, when the config has policies
    assignment: Assignment | None = None  # the experiment arm, when one applies
    # Whether and when the first attempt is hedged, and why (`/v1/route/explain` shows it).
    hedge: HedgePlan = NO_DEPLOYMENT

    @property
    def policy_requires_key(self) -> bool:
        """Whether the task's policy requires an Idempotency-Key (on every request of it)."""
        return self.policy is not None and self.policy.require_idempotency_key


def request_view(request: ChatCompletionRequest) -> RequestView:
    """The classifier's view of the request. Tools are read as the messages are, without
    invisible characters (`del\u200bete_user` hid its verb from the side-effect rule)."""
    tools = request.tools if request.tools is not None else []
    names = [visible(t.spec.name) for t in tools]
    descriptions = [visible(t.spec.description or "") for t in tools]
    for function in _legacy_functions(request):  # OpenAI's older `functions` field
        names.append(visible(str(function.get("name", ""))))
        descriptions.append(visible(str(function.get("description", "") or "")))
    return RequestView(
        messages=tuple((m.role, m.text()) for m in request.messages),
        tool_names=tuple(names),
        tool_descriptions=tuple(descriptions),
        response_format=request.response_format.type if request.response_format else None,
    )


def _legacy_functions(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    found = (request.model_extra or {}).get("functions")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []



def hints_from(request: ChatCompletionRequest, headers: Mapping[str, str],
               risk_may_lower: bool = True) -> Hints:
    """Explicit labels from the `x-slorouter-task`/`-risk` header or `metadata.task`/`.risk`
    (`risk_may_lower`: whether the caller's key lets its risk hint lower the risk).

    Either place may carry a hint, or both with the same value; both with different values is
    a 400 (`conflicting_hint`): neither silently wins. An unknown value in a header is a 400
    (`invalid_hint`); in `metadata`, which is the client's own set of tags in OpenAI's API
    (`{"task": "ticket-triage"}`), a value that names no task or risk is no hint at all.
    """
    metadata = request.metadata if request.metadata is not None else {}
    task = _one_hint("task", headers, _known_only(metadata, "task", TASKS))
    risk = _one_hint("risk", headers, _known_only(metadata, "risk", RISKS))
    if task is not None and task not in TASKS:
        raise RequestError(f"unknown task hint {shown(task, ECHOED_CHARS)!r}; one of "
                           f"{', '.join(TASKS)}",
                           param=_hint_param(headers, "task"), code="invalid_hint")
    if risk is not None and risk not in RISKS:
        raise RequestError(f"unknown risk hint {shown(risk, ECHOED_CHARS)!r}; one of "
                           f"{', '.join(RISKS)}",
                           param=_hint_param(headers, "risk"), code="invalid_hint")
    return Hints(task=_as_task(task), risk=_as_risk(risk), risk_may_lower=risk_may_lower)


def header_or_metadata(headers: Mapping[str, str], header: str, metadata: object, key: str,
                       what: str, code: str) -> object | None:
    """What a client gave in its `header` or in `metadata[key]`, or both with the same value;
    both with different values is a 400 (`code`): neither place silently wins."""
    given = headers.get(header)
    field = metadata.get(key) if isinstance(metadata, Mapping) else None
    if given is not None and field is not None and given != str(field):
        raise RequestError(
            f"conflicting {what}: header {header} is {shown(given, ECHOED_CHARS)!r} but "
            f"metadata.{key} is {shown(field, ECHOED_CHARS)!r}; send one of them, or the same "
            "value in both", param=f"metadata.{key}", code=code)
    return given if given is not None else field


def session_of(headers: Mapping[str, str], metadata: object) -> str | None:
    """The experiment unit `session`: its header or `metadata.session_id`, not two of them."""
    value = header_or_metadata(headers, "x-slorouter-session", metadata, "session_id",
                               "sessions", "conflicting_session")
    return None if value is None else str(value)


def _one_hint(name: str, headers: Mapping[str, str], metadata: Mapping[str, str]) -> str | None:
    value = header_or_metadata(headers, f"x-slorouter-{name}", metadata, name,
                               f"{name} hints", "conflicting_hint")
    return None if value is None else str(value)


def _known_only(metadata: Mapping[str, str], key: str,
                known: tuple[str, ...]) -> Mapping[str, str]:
    """`metadata` without `key` when its value names none of `known`."""
    value = metadata.get(key)
    if value is None or str(value) in known:
        return metadata
    return {k: v for k, v in metadata.items() if k != key}


def _hint_param(headers: Mapping[str, str], name: str) -> str:
    """Where a bad hint came from: its header, else the body's `metadata`."""
    header = f"x-slorouter-{name}"
    return header if header in headers else f"metadata.{name}"


def _as_task(value: str | None) -> Task | None:
    return next((t for t in TASKS if t == value), None)


def _as_risk(value: str | None) -> Risk | None:
    return next((r for r in RISKS if r == value), None)


def estimate_prompt_tokens(view: RequestView, request: ChatCompletionRequest | None = None
                           ) -> int:
    """Text by script (`router.token_estimate`: four ASCII letters or spaces a token, one an
    ASCII digit, 0.55 an ASCII sign, more in base64, any other character its weight in a table
    generated from cl100k_base, 1.1 for a Persian or a common Chinese one, 2-3.4 for scripts
    cl100k_base writes byte by byte, about 3 for an emoji): cheap, and erring high for fit and
    cost checks. With
    the request, what the text view leaves out counts too: the tools' parameter schemas (often
    most of an agent's prompt), earlier tool calls' arguments, legacy `functions`, and media
    parts by what their headers say (`router.media_tokens`: an image's size, a recording's
    length, a PDF's pages)."""
    in_text = sum(text_tokens(text) for _, text in view.messages)
    in_text += sum(text_tokens(name) + text_tokens(desc)
                   for name, desc in zip(view.tool_names, view.tool_descriptions, strict=True))
    if request is not None:
        in_text += _structured_tokens(request)
    tokens = int(in_text) + 4 * len(view.messages)
    if request is not None:
        tokens += sum(media_part_tokens(part.type, getattr(part, part.type))
                      for m in request.messages if isinstance(m.content, list)
                      for part in m.content if part.type in MEDIA_PARTS)
    return tokens


def estimate_answer_tokens(messages: Iterable[object]) -> int:
    """The output tokens of an answer whose upstream reported no usage, estimated as a prompt
    is: each message's text (content, refusal) by script, its tool calls as their JSON."""
    tokens = 0.0
    for message in messages:
        if not isinstance(message, dict):
            continue
        tokens += sum(text_tokens(text) for text in (message.get("content"),
                                                     message.get("refusal"))
                      if isinstance(text, str))
        if message.get("tool_calls"):
            tokens += utf8_tokens(orjson.dumps(message["tool_calls"]))
    return int(tokens)


def _structured_tokens(request: ChatCompletionRequest) -> float:
    """Tokens of the JSON a text view does not hold (serialised only when present), by script
    like the text: a Chinese property description or argument is not four bytes a token."""
    parts: list[object] = [t.function.parameters for t in request.tools or ()
                           if isinstance(t, FunctionTool) and t.function.parameters]
    parts += [m.tool_calls for m in request.messages if m.tool_calls]
    parts += [f["parameters"] for f in _legacy_functions(request) if f.get("parameters")]
    return sum(utf8_tokens(orjson.dumps(part)) for part in parts)


def request_facts(request: ChatCompletionRequest, view: RequestView, labels: Labels,
                  first_token_wait_s: float | None = None,
                  answer_wait_s: float | None = None,
                  hour_cache_writes: bool = False) -> RequestFacts:
    limit = request.output_token_limit()
    return RequestFacts(
        first_token_wait_s=first_token_wait_s, answer_wait_s=answer_wait_s,
        hour_cache_writes=hour_cache_writes,
        task=labels.task, risk=labels.risk,
        prompt_tokens=estimate_prompt_tokens(view, request),
        max_output_tokens=limit if limit is not None else DEFAULT_MAX_OUTPUT_TOKENS,
        needs_tools=bool(view.tool_names), completions=request.n or 1, stream=request.stream,
        needs_json=view.response_format in ("json_object", "json_schema"),
        json_object=view.response_format == "json_object",
        legacy_functions=bool(_legacy_functions(request)),
        needs_logprobs=request.logprobs is True, temperature=request.temperature,
        has_stop=bool(request.stop), blank_stop=_blank_stop(request.stop),
        sets_tool_choice=request.tool_choice not in (None, "auto"),
        audio_input=any(isinstance(m.content, list) and any(p.type == "input_audio"
                                                            for p in m.content)
                        for m in request.messages),
        audio_output=_asks_audio(request),
        prompt_text=next((text for role, text in reversed(view.messages) if role == "user"), ""))


def _asks_audio(request: ChatCompletionRequest) -> bool:
    """Whether the request asks for a spoken answer (`modalities` naming audio, or `audio`)."""
    extra = request.model_extra or {}
    modalities = extra.get("modalities")
    return (isinstance(modalities, list) and "audio" in modalities) or bool(extra.get("audio"))


def _blank_stop(stop: str | list[str] | None) -> bool:
    """Whether a stop sequence is empty or whitespace only (`RequestFacts.blank_stop`)."""
    if stop is None:
        return False
    return any(not s.strip() for s in ((stop,) if isinstance(stop, str) else stop))


def arm_degraded(assignment: Assignment, decision: Decision) -> bool:
    """Whether the arm's route could not serve (its model did not qualify), so the policy as
    written, control's route, answers for the arm."""
    return assignment.route.startswith("model:") and not decision.restricted


def arm_model(assignment: Assignment | None) -> str | None:
    """The model an experiment arm pins the policy to (`model:<name>`), if any."""
    if assignment is None or not assignment.route.startswith("model:"):
        return None
    return assignment.route.removeprefix("model:")


@functools.lru_cache(maxsize=1024)
def prefix_partition_of(tenant: str, scopes: tuple[str, ...]) -> str:
    """The tenant alone when its key has no scopes (no key: loopback), else the tenant and its
    distinct scopes in order as a JSON array (scopes may hold any character; a tenant's name
    never begins with `[`)."""
    return tenant if not scopes else orjson.dumps([tenant, *sorted(set(scopes))]).decode()


def stall_after_s(policy: TaskPolicy | None, stream: bool) -> float | None:
    """How long an attempt may wait before its wait is a stall: `STALL_TARGET_MULTIPLE` times
    the task's TTFT target for a stream's first token (its E2E target when it has none), its
    E2E target for a whole answer; None without a target (nothing says how long is too long)."""
    if policy is None:
        return None
    slo = policy.slo
    target_ms = (slo.ttft_p95_ms or slo.e2e_p99_ms) if stream else slo.e2e_p99_ms
    return None if target_ms is None else STALL_TARGET_MULTIPLE * target_ms / 1000.0


def is_side_effecting(labels: Labels) -> bool:
    """Requests that may act on the world: an `action` taken to act (`Labels.acts`), or
    side-effecting tools."""
    return (labels.task == "action" and labels.acts) or "side_effects" in labels.signals


def upstream_body(raw: Mapping[str, Any], tenant: str) -> dict[str, Any]:
    """What the provider receives: the client's body as sent, minus the router's own fields
    (and `metadata`'s, `provider_tags`) and a `top_logprobs: 0` that asks for nothing, with a
    client's own `prompt_cache_key` and `cache_salt` kept within its tenant (hashed with it:
    `tenant` is the caller's prefix partition), so that two tenants choosing the same key or
    salt never share a provider cache."""
    body = {key: value for key, value in raw.items() if key not in _ROUTER_FIELDS}
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        tags = provider_tags(metadata)
        if tags:
            body["metadata"] = tags
        else:
            del body["metadata"]
    chosen = body.get("prompt_cache_key")
    if isinstance(chosen, str):
        body["prompt_cache_key"] = client_prompt_cache_key(tenant, chosen)
    elif chosen is None:  # an explicit null is no key: the tenant's own is marked in its place
        body.pop("prompt_cache_key", None)
    salt = body.get("cache_salt")
    if isinstance(salt, str):
        body["cache_salt"] = cache_salt(tenant, salt)
    if body.get("top_logprobs") == 0 and body.get("logprobs") is not True:
        # No alternatives of logprobs not asked for: a no-op that OpenAI-wire servers disagree
        # on (vLLM takes it, a strict check refuses it), so one deployment answered 200 and
        # another 400, and `auto` paid an attempt at each. Left out, every one answers alike.
        del body["top_logprobs"]
    return body


def provider_tags(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The client's `metadata` less what the router read as its own: a `task` or `risk` hint
    (one that names a task or risk: any other value is the client's own tag), the data
    version and the session. Those are for the router; sent on, they reached the provider
    (OpenAI refuses `metadata` on a request without `store: true`, so a hint given in
    `metadata` turned into a 400 from the provider)."""
    return {key: value for key, value in metadata.items()
            if key not in _ROUTER_METADATA and not (
                (key == "task" and str(value) in TASKS) or (key == "risk" and str(value) in RISKS))}


class ChatPipeline:
    def __init__(self, config: RuntimeConfig, classifier: Classifier, runner: Runner,
                 ranker: Ranker | None = None, health: Health | None = None,
                 hedge_delay: HedgeDelay | None = None,
                 load: Mapping[str, int] | None = None,
                 assign_arm: AssignArm | None = None,
                 expose_arm: ExposeArm | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config
        self._classifier = classifier
        self._runner = runner
        self._ranker = ranker if ranker is not None else StaticRanker()
        self._health: Health = health if health is not None else (lambda _name: True)
        self._hedge_delay = hedge_delay
        self._load: Mapping[str, int] = load if load is not None else {}
        self._assign_arm = assign_arm
        self._expose_arm = expose_arm
        self._clock = clock

    def prepare(self, request: ChatCompletionRequest, raw: Mapping[str, Any],
                headers: Mapping[str, str], deadline: float,
                caller: Caller | None = None, arrived_at: float | None = None) -> Prepared:
        """Classify and decide (`measure`, then `route`). `deadline` (the server's or the
        client's, by this clock) is shortened to the task policy's `timeout_s` from
        `arrived_at` (default: now); a stream's head deadline comes from the SDKs' timeout
        headers (`head_timeout_s`). The ranking holds the request to the time both leave its
        client waiting (`RequestFacts`)."""
        return self.route(self.measure(request, raw, headers, deadline, caller, arrived_at))

    def measure(self, request: ChatCompletionRequest, raw: Mapping[str, Any],
                headers: Mapping[str, str], deadline: float,
                caller: Caller | None = None, arrived_at: float | None = None) -> Measured:
        """What the request says of itself: its labels, deadlines and facts. It reads nothing
        the event loop writes (statistics, health, in-flight counts, experiments' halts), so
        a very long prompt's may run on a worker thread (`router.api.chat.prepare_off_loop`)."""
        caller = caller if caller is not None else Caller()
        started = self._clock()
        view = request_view(request)
        labels = self._classifier.classify(
            view, hints_from(request, headers, caller.risk_hints_may_lower))
        classified = self._clock()
        policies = self.config.source.policies
        policy = policies.for_task(labels.task) if policies is not None else None
        since = arrived_at if arrived_at is not None else started
        if policy is not None and policy.timeout_s is not None:
            deadline = min(deadline, since + policy.timeout_s)
        head_s = head_timeout_s(headers) if request.stream else None
        head_deadline = None if head_s is None else since + head_s
        first_by = first_content_by(deadline, head_deadline)
        facts = request_facts(request, view, labels, first_token_wait_s=first_by - classified,
                              answer_wait_s=deadline - classified,
                              hour_cache_writes=writes_for_an_hour(raw.get("messages") or (),
                                                                   raw.get("tools")))
        phases = Phases(classify=classified - started, decide=self._clock() - classified)
        return Measured(request, raw, caller, labels, facts, policy, deadline, head_deadline,
                        phases)

    def route(self, measured: Measured) -> Prepared:
        """Decide and plan a measured request. It reads the statistics, health, in-flight
        counts and experiments the event loop keeps: call it on the loop."""
        started = self._clock()
        request, raw, caller = measured.request, measured.raw, measured.caller
        labels, facts, policy = measured.labels, measured.facts, measured.policy
        deadline = measured.deadline
        assignment = None
        if self._assign_arm is not None and request.model in self.config.aliases:
            assignment = self._assign_arm(labels.task, caller.units())
        partition = caller.prefix_partition()  # whose prompt prefixes may share a cache
        decision = self._with_affinity(
            decide(request.model, labels, facts, self.config, self._ranker, self._health,
                   restrict_to=arm_model(assignment)), raw, partition)
        deployments = [self.config.deployments[name] for name in decision.deployments]
        side_effecting = is_side_effecting(labels)
        body = upstream_body(raw, partition)
        if (policy is not None and policy.max_cost_per_request_usd is not None
                and request.model in self.config.aliases and request.output_token_limit() is None):
            cap = output_cap(policy.max_cost_per_request_usd, facts,
                             [(d.worst_prompt_price_1h_per_mtok if facts.hour_cache_writes
                               else d.worst_prompt_price_per_mtok, d.output_price_per_mtok)
                              for d in deployments],
                             windows=[d.context_window for d in deployments])
            if cap is not None:
                body["max_completion_tokens"] = cap
        hedge = self._hedge_plan(policy, facts, decision, side_effecting,
                                 first_content_by(deadline, measured.head_deadline))
        chosen_salt = body.pop("cache_salt", None)  # for the salted body alone
        plan = Plan(deployments=deployments, body=body, deadline=deadline,
                    side_effecting=side_effecting,
                    bodies=marked_bodies(body, partition,
                                         {d.body_kind for d in deployments},
                                         chosen_salt=chosen_salt),
                    prompt_tokens=facts.prompt_tokens, stream=facts.stream,
                    head_deadline=measured.head_deadline,
                    stall_after_s=stall_after_s(policy, facts.stream),
                    principal=caller.tenant,
                    hedge_delay_s=hedge.delay_s)
        phases = replace(measured.phases,
                         decide=measured.phases.decide + self._clock() - started)
        return Prepared(request, labels, decision, plan, facts, phases, policy, assignment, hedge)

    def expose(self, prepared: Prepared, caller: Caller) -> None:
        """Take feedback on this request as its arm's: call it once the arm's route is to
        answer it. Not for an answer control's route gives for the arm (degraded), an
        explanation, or an idempotent replay (the first request's answer, under a new id: its
        feedback was credited to the arm the new id hashed to)."""
        assignment = prepared.assignment
        if (assignment is not None and self._expose_arm is not None and not caller.explaining
                and not arm_degraded(assignment, prepared.decision)):
            self._expose_arm(assignment, caller.units())

    def _with_affinity(self, decision: Decision, raw: Mapping[str, Any],
                       partition: str) -> Decision:
        """One tenant's requests sharing a prompt prefix go to the same replica of the chosen
        model (another tenant's, or the same tenant's under other scopes: another `partition`,
        are placed independently), among the replicas expected to meet the SLO when any is: a
        warm KV cache is no reason to send a request to a replica the ranker predicts will miss
        it."""
        replicas = self.config.models.get(decision.model, ())
        if len(replicas) < 2 or not self.config.source.server.cache.prefix_affinity:
            return decision
        meeting = {r.deployment for r in decision.ranking_detail if r.meets_slo}
        if meeting:
            replicas = tuple(r for r in replicas if r in meeting)
        order = affinity_order(decision.deployments, replicas, raw, partition, self._load)
        return replace(decision, deployments=order)

    def _hedge_plan(self, policy: TaskPolicy | None, facts: RequestFacts, decision: Decision,
                    side_effecting: bool, first_by: float) -> HedgePlan:
        """Whether and when to hedge the first attempt; a hedge must fit before `first_by`, the
        time by which the first content is due (a stream's head deadline, else the answer's)."""
        if not decision.deployments:
            return NO_DEPLOYMENT
        if policy is None:
            return NO_POLICY
        inputs = HedgeInputs(
            policy_allows=policy.hedging, task=facts.task, risk=facts.risk,
            side_effecting=side_effecting, has_alternate=len(decision.deployments) > 1,
            predicted_ttft_s=None, remaining_s=first_by - self._clock())
        refused = refusal_before_prediction(inputs)
        if refused is not None:  # the TTFT sketch is read only for a request that may hedge
            return HedgePlan(None, refused)
        if self._hedge_delay is None:
            return NO_STATISTICS
        predicted = self._hedge_delay(decision.deployments[0], facts.task, facts.prompt_tokens,
                                      facts.stream)
        return plan_hedge(replace(inputs, predicted_ttft_s=predicted))

    def _require_route(self, prepared: Prepared) -> None:
        if not prepared.decision.deployments:  # the fields are named only in the error
            request = prepared.request
            tools_field = "functions" if request.tools is None else "tools"
            require_route(prepared.decision, self._runner.soonest_probe_s,
                          tools_field=tools_field, budget_field=_cost_field(request))

    async def complete(self, prepared: Prepared,
                       outcome: Outcome) -> tuple[Deployment, Completion]:
        self._require_route(prepared)
        return await self._runner.complete(prepared.plan, outcome.attempts)

    async def open_stream(self, prepared: Prepared, outcome: Outcome) -> CommittedStream:
        self._require_route(prepared)
        return await self._runner.open_stream(prepared.plan, outcome.attempts)


def _cost_field(request: ChatCompletionRequest) -> str:
    """The field that makes a request over its cost ceiling, for the 400 to name: `n` when it
    asks for several answers, else its output limit, else (none set, the router's default
    limit priced) its prompt."""
    if (request.n or 1) > 1:
        return "n"
    if request.max_completion_tokens is not None:
        return "max_completion_tokens"
    return "max_tokens" if request.max_tokens is not None else "messages"
