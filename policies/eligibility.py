"""Which deployments may serve a request under its task's policy, and why (pure).

A candidate deployment is eligible when it passes every check: the quality floor (its model's
eval *lower* bound clears the floor), the risk rule, fit (context window, tools, JSON mode),
health, and the cost ceiling. Each check's verdict is kept for the explain endpoint. Ranking the
eligible ones by latency and cost happens elsewhere (the router's scoring). A request that names
its model is judged by the risk rule alone, and only when the configuration asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter

from policies.eval_report import EvalResult, QualityTable
from policies.intervals import relative_floor_margin
from policies.labels import Risk, Task
from policies.schema import QualityFloor, TaskPolicy


@dataclass(frozen=True, slots=True)
class RequestFacts:
    task: Task
    risk: Risk
    prompt_tokens: int
    max_output_tokens: int
    needs_tools: bool = False
    needs_json: bool = False
    needs_logprobs: bool = False
    prompt_text: str = field(default="", repr=False)  # for learned routing; never logged
    completions: int = 1  # `n`: each completion may use `max_output_tokens`
    stream: bool = True  # streamed answer (scored on TTFT), else whole (scored on E2E)
    temperature: float | None = None  # the request's sampling temperature, when it sets one
    json_object: bool = False  # `response_format` json_object (needs_json covers json_schema too)
    legacy_functions: bool = False  # the legacy `functions` field (needs_tools covers it too)
    has_stop: bool = False  # sets stop sequences
    blank_stop: bool = False  # a stop sequence empty or of whitespace only (`"\n"`)
    sets_tool_choice: bool = False  # a `tool_choice` other than `auto` (required, none, named)
    audio_input: bool = False  # an `input_audio` content part
    audio_output: bool = False  # asks for spoken output (`modalities` with audio, `audio`)
    hour_cache_writes: bool = False  # marks prompt-cache writes for an hour (`ttl: "1h"`)
    # How long the client waits, from the decision, for a stream's first token and for the
    # whole answer (its deadline: the client's timeout headers, the policy's `timeout_s`, the
    # server's); None where no deadline is known. The ranking holds the request to them.
    first_token_wait_s: float | None = None
    answer_wait_s: float | None = None


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    name: str
    model: str
    context_window: int | None
    supports_tools: bool
    supports_json: bool
    zero_data_retention: bool
    price_in_per_m: float  # the most a prompt token may cost (a cache write's premium included)
    price_out_per_m: float
    healthy: bool = True
    max_output_tokens: int | None = None  # the model's most output per answer; None: unknown
    supports_n: bool = True  # answers `n` > 1 choices
    supports_logprobs: bool = True  # returns `logprobs`
    max_temperature: float = 2.0  # the highest `temperature` the provider takes
    takes_blank_stop: bool = True  # takes a whitespace-only stop sequence (Anthropic refuses)
    # What the adapter carries to the provider (litellm drops the legacy `functions`, and
    # to Anthropic a json_object `response_format` and a json_schema beside tools, answering 200
    # without them; `tools` and `tool_choice` for some Fireworks models, `stop` for some xAI
    # ones, spoken output and `input_audio` parts for Anthropic's):
    supports_functions: bool = True
    supports_json_object: bool = True
    supports_schema_with_tools: bool = True
    passes_tools: bool = True
    supports_tool_choice: bool = True
    supports_stop: bool = True
    supports_audio_input: bool = True
    supports_audio_output: bool = True
    # The most a prompt token may cost when the request marks hour-long cache writes (Anthropic's
    # 1-hour write price); None: `price_in_per_m`.
    price_in_1h_per_m: float | None = None

_PASSED = attrgetter("passed")


class CheckName(StrEnum):
    """The eligibility checks, by the name a `Check` carries (and the explain endpoint shows)."""

    FLOOR = "floor"  # the model's eval lower bound clears the task's quality floor
    RISK = "risk"  # the risk rule: allowed models, zero data retention
    FITS = "fits"  # context window, tools, JSON mode
    HEALTHY = "healthy"  # the deployment's circuit is closed
    BUDGET = "budget"  # the worst-case cost is under the policy's ceiling


class Role(StrEnum):
    """Why a deployment was judged for a request: the part of the policy that named it."""

    CANDIDATE = "candidate"  # one of the task policy's candidates
    FALLBACK = "fallback"  # one of its fallbacks (tried after every candidate)
    NO_CANDIDATE_FALLBACK = "no_candidate_fallback"  # its last resort when no candidate passes
    PINNED = "pinned"  # the request named the model itself


@dataclass(frozen=True, slots=True)
class Check:
    """One check's verdict and why. The why (`detail`, for the explain endpoint and error
    messages) is formatted only when read, from a literal `template` and its `values`: most
    requests never read it, and a decision formats ten of them."""

    name: CheckName
    passed: bool
    template: str
    values: tuple[object, ...] = ()

    @property
    def detail(self) -> str:
        return self.template.format(*self.values) if self.values else self.template


@dataclass(frozen=True, slots=True)
class Verdict:
    model: str
    deployment: str
    role: Role
    checks: tuple[Check, ...]
    cost_usd: float  # worst case: prompt + n x max output tokens

    @property
    def eligible(self) -> bool:
        return all(map(_PASSED, self.checks))  # no generator to resume per check


def floor_threshold(floor: QualityFloor, task: Task,
                    quality: QualityTable) -> tuple[float | None, str, tuple[object, ...]]:
    """The floor's value for this task (None when it cannot be known), and the rule or the
    reason as a `Check` template and its values."""
    if floor.min is not None:
        return floor.min, "{} >= {:.3f}", (floor.metric, floor.min)
    assert floor.relative_to is not None and floor.ratio is not None
    reference = quality.get(floor.relative_to, task, floor.metric)
    if reference is None:
        refused = quality.refusal(floor.relative_to, task, floor.metric)
        if refused is not None:
            return (None, "eval of reference {} for {}/{} set aside: {}",
                    (floor.relative_to, task, floor.metric, refused))
        return None, "no eval of reference {} for {}/{}", (floor.relative_to, task, floor.metric)
    value = floor.ratio * reference.mean
    return value, "{} >= {:g} x {} ({:.3f})", (floor.metric, floor.ratio, floor.relative_to, value)


def floor_check(floor: QualityFloor | None, model: str, task: Task,
                quality: QualityTable) -> Check:
    if floor is None:
        return Check(CheckName.FLOOR, True, "no quality floor")
    threshold, rule, rule_values = floor_threshold(floor, task, quality)
    if threshold is None:
        return Check(CheckName.FLOOR, False, rule, rule_values)
    result = quality.get(model, task, floor.metric)
    if result is None:
        refused = quality.refusal(model, task, floor.metric)
        if refused is not None:
            return Check(CheckName.FLOOR, False, "eval of {} for {}/{} set aside: {}; " + rule,
                         (model, task, floor.metric, refused, *rule_values))
        return Check(CheckName.FLOOR, False, "no eval of {} for {}/{}; " + rule,
                     (model, task, floor.metric, *rule_values))
    if floor.relative_to is not None and floor.ratio is not None:
        return _relative_floor_check(floor.relative_to, floor.ratio, model, result,
                                     quality.get(floor.relative_to, task, floor.metric),
                                     rule, rule_values)
    passed = result.lower >= threshold
    return Check(CheckName.FLOOR, passed,
                 "lower bound {:.3f} (mean {:.3f}, n={}) {} floor; " + rule,
                 (result.lower, result.mean, result.n, ">=" if passed else "<", *rule_values))


def _relative_floor_check(reference: str, ratio: float, model: str, result: EvalResult,
                          measured: EvalResult | None, rule: str,
                          rule_values: tuple[object, ...]) -> Check:
    """A relative floor: the lower bound of `model`'s quality minus `ratio` times the
    reference's, from both results' uncertainty (each standard error read off its 95% bound on
    the side that matters: the model's lower, the reference's upper), must be at least 0. The
    reference meets a floor relative to itself. Comparing the model's lower bound with the
    ratio of the reference's mean, a point estimate, let a model at the floor pass about twice
    as often as the bound's 2.5% (the eval audit: 4.6-6.5%), and failed the reference itself."""
    if model == reference:
        return Check(CheckName.FLOOR, True, "the reference of its own floor; " + rule,
                     rule_values)
    assert measured is not None  # `floor_threshold` found it
    if result.suite_hash and measured.suite_hash and \
            set(result.suite_hash.split("+")) != set(measured.suite_hash.split("+")):
        # A ratio of two scores on different suites says nothing of the two models (a model
        # evaluated again on an easier suite passed: the evals audit of 2026-12-07).
        return Check(CheckName.FLOOR, False,
                     "measured on suite {} and its reference on suite {}: a relative floor "
                     "compares the two on one suite (run `slorouter eval run` with both); "
                     + rule, (result.suite_hash, measured.suite_hash, *rule_values))
    margin = relative_floor_margin(result.mean, result.lower, measured.mean, measured.upper,
                                   ratio)
    passed = margin >= 0.0
    return Check(CheckName.FLOOR, passed,
                 "mean {:.3f} (n={}) less the floor, at 95%: {:+.3f} {} 0 (reference n={}); "
                 + rule, (result.mean, result.n, margin, ">=" if passed else "<", measured.n,
                          *rule_values))


# The failed `fits` checks' templates, and the request field each blames (`no_model_fits`'s
# `param`; "tools" stands for the legacy `functions` too, `router.decide.require_route`).
_TOO_LONG = "needs {} tokens > window {}"
_NO_TOOLS = "request declares tools; deployment has no tool support"
_NO_JSON = "request asks for JSON; deployment has no JSON mode"
_NO_CHOICES = "request asks for {} choices (n); deployment answers one"
_NO_LOGPROBS = "request asks for logprobs; deployment returns none"
_TOO_HOT = "request's temperature {:g} > deployment's most {:g}"
_BLANK_STOP = "request has a whitespace-only stop sequence; deployment's provider refuses it"
_NO_FUNCTIONS = "request declares legacy functions; deployment's adapter drops them"
_NO_JSON_OBJECT = "request asks for a json_object response_format; deployment's adapter drops it"
_NO_SCHEMA_WITH_TOOLS = ("request asks for a json_schema response_format beside tools; "
                         "deployment's adapter cannot give both")
_DROPS_TOOLS = "request declares tools; deployment's adapter drops them"
_DROPS_TOOL_CHOICE = "request sets tool_choice; deployment's adapter drops it"
_DROPS_STOP = "request sets stop sequences; deployment's adapter drops them"
_DROPS_AUDIO_INPUT = "request has input_audio content; deployment's adapter drops it"
_DROPS_AUDIO_OUTPUT = "request asks for audio output; deployment's adapter drops it"
UNFIT_FIELD = {_TOO_LONG: "messages", _NO_TOOLS: "tools", _NO_JSON: "response_format",
               _NO_CHOICES: "n", _NO_LOGPROBS: "logprobs", _TOO_HOT: "temperature",
               _BLANK_STOP: "stop",
               _NO_FUNCTIONS: "functions", _NO_JSON_OBJECT: "response_format",
               _NO_SCHEMA_WITH_TOOLS: "response_format", _DROPS_TOOLS: "tools",
               _DROPS_TOOL_CHOICE: "tool_choice", _DROPS_STOP: "stop",
               _DROPS_AUDIO_INPUT: "messages", _DROPS_AUDIO_OUTPUT: "modalities"}


_DROPPED = {"tools": _DROPS_TOOLS, "tool_choice": _DROPS_TOOL_CHOICE, "stop": _DROPS_STOP,
            "input_audio": _DROPS_AUDIO_INPUT, "modalities": _DROPS_AUDIO_OUTPUT}


def too_hot(facts: RequestFacts, deployment: DeploymentFacts) -> bool:
    """Whether the request's temperature is above what the deployment's provider takes (it
    would refuse the request: Anthropic's models take 0-1, OpenAI's 0-2)."""
    return facts.temperature is not None and facts.temperature > deployment.max_temperature


def refuses_stop(facts: RequestFacts, deployment: DeploymentFacts) -> bool:
    """Whether the deployment's provider refuses one of the request's stop sequences: Anthropic
    takes none that is empty or whitespace only (a 400), where OpenAI stops at `"\n"`."""
    return facts.blank_stop and not deployment.takes_blank_stop


def asks_droppable(facts: RequestFacts) -> bool:
    """Whether the request asks for something a deployment's adapter may drop (`dropped_field`):
    most requests do not, and are spared the per-deployment look."""
    return (facts.completions > 1 or facts.needs_logprobs or facts.legacy_functions
            or facts.needs_json or facts.needs_tools or facts.has_stop or facts.audio_input
            or facts.audio_output)


# (request field, whether the request asks for it, whether the deployment carries it), in the
# order checked: the first a deployment drops is the one named.
_DROPPABLE: tuple[tuple[str, Callable[[RequestFacts], bool],
                        Callable[[DeploymentFacts], bool]], ...] = (
    ("n", lambda facts: facts.completions > 1, attrgetter("supports_n")),
    ("tools", attrgetter("needs_tools"), attrgetter("passes_tools")),
    ("tool_choice", attrgetter("sets_tool_choice"), attrgetter("supports_tool_choice")),
    ("stop", attrgetter("has_stop"), attrgetter("supports_stop")),
    ("input_audio", attrgetter("audio_input"), attrgetter("supports_audio_input")),
    ("modalities", attrgetter("audio_output"), attrgetter("supports_audio_output")),
    ("logprobs", attrgetter("needs_logprobs"), attrgetter("supports_logprobs")),
    ("functions", attrgetter("legacy_functions"), attrgetter("supports_functions")),
    ("response_format", attrgetter("json_object"), attrgetter("supports_json_object")),
    ("response_format", lambda facts: facts.needs_json and not facts.json_object
     and facts.needs_tools, attrgetter("supports_schema_with_tools")),
)


def dropped_field(facts: RequestFacts, deployment: DeploymentFacts) -> str | None:
    """The request field the deployment would drop, or mangle, rather than answer, and answer
    200 all the same, if any: `n` (one choice comes), `logprobs` (none come), `functions`
    (prose comes, no function call), `response_format` (prose instead of a JSON object; tools
    never called beside a schema), `tools` and `tool_choice` (prose, or a tool the client
    forbade), `stop` (the answer runs past it), `input_audio` (the model answers without the
    recording), `modalities` (no spoken answer). litellm does so for the providers that take
    them not."""
    for field_name, asks, carries in _DROPPABLE:
        if asks(facts) and not carries(deployment):
            return field_name
    return None


def output_tokens(facts: RequestFacts, deployment: DeploymentFacts) -> int:
    """The output limit per completion the deployment is sent: the request's, lowered to the
    deployment's `max_output_tokens` (`router.providers.base.output_limited`)."""
    most = deployment.max_output_tokens
    return facts.max_output_tokens if most is None else min(facts.max_output_tokens, most)


def _fits(facts: RequestFacts, deployment: DeploymentFacts, output: int) -> Check:
    needed = facts.prompt_tokens + output
    if deployment.context_window is not None and needed > deployment.context_window:
        return Check(CheckName.FITS, False, _TOO_LONG, (needed, deployment.context_window))
    if facts.needs_tools and not deployment.supports_tools:
        return Check(CheckName.FITS, False, _NO_TOOLS)
    if facts.needs_json and not deployment.supports_json:
        return Check(CheckName.FITS, False, _NO_JSON)
    if too_hot(facts, deployment):
        return Check(CheckName.FITS, False, _TOO_HOT,
                     (facts.temperature, deployment.max_temperature))
    if refuses_stop(facts, deployment):
        return Check(CheckName.FITS, False, _BLANK_STOP)
    dropped = dropped_field(facts, deployment) if asks_droppable(facts) else None
    if dropped == "n":
        return Check(CheckName.FITS, False, _NO_CHOICES, (facts.completions,))
    if dropped == "logprobs":
        return Check(CheckName.FITS, False, _NO_LOGPROBS)
    if dropped == "functions":
        return Check(CheckName.FITS, False, _NO_FUNCTIONS)
    if dropped == "response_format":
        return Check(CheckName.FITS, False,
                     _NO_JSON_OBJECT if facts.json_object else _NO_SCHEMA_WITH_TOOLS)
    if dropped is not None:
        return Check(CheckName.FITS, False, _DROPPED[dropped])
    return Check(CheckName.FITS, True, "{} tokens fit", (needed,))


def risk_check(policy: TaskPolicy, facts: RequestFacts, deployment: DeploymentFacts) -> Check:
    """The policy's rule for the request's risk: the models it allows, zero data retention."""
    rule = policy.risk.get(facts.risk)
    if rule is None:
        return Check(CheckName.RISK, True, "no rule for risk {}", (facts.risk,))
    if rule.candidates is not None and deployment.model not in rule.candidates:
        return Check(CheckName.RISK, False, "risk {} allows only {}",
                     (facts.risk, ", ".join(rule.candidates)))
    if rule.require_zero_data_retention and not deployment.zero_data_retention:
        return Check(CheckName.RISK, False, "risk {} requires zero data retention", (facts.risk,))
    return Check(CheckName.RISK, True, "risk {} rule met", (facts.risk,))


def _budget(policy: TaskPolicy, cost: float) -> Check:
    ceiling = policy.max_cost_per_request_usd
    if ceiling is None:
        return Check(CheckName.BUDGET, True, "no cost ceiling")
    return Check(CheckName.BUDGET, cost <= ceiling, "worst case ${:.6f} vs ceiling ${:g}",
                 (cost, ceiling))


def worst_case_cost(facts: RequestFacts, deployment: DeploymentFacts) -> float:
    """USD for the prompt plus every completion at the output limit it is sent."""
    return _cost(facts, deployment, output_tokens(facts, deployment))


def _cost(facts: RequestFacts, deployment: DeploymentFacts, output: int) -> float:
    return (facts.prompt_tokens * worst_prompt_price(facts, deployment)
            + facts.completions * output * deployment.price_out_per_m) / 1e6


def worst_prompt_price(facts: RequestFacts, deployment: DeploymentFacts) -> float:
    """What a prompt token of this request may cost on `deployment` (USD per 1M): a 1-hour
    cache write's price where the request marks such writes and the deployment has one (they
    were priced as 5-minute writes, 1.6 times less, until 2026-12-07: the prompt-cache audit)."""
    hour = deployment.price_in_1h_per_m
    return hour if facts.hour_cache_writes and hour is not None else deployment.price_in_per_m


def output_cap(ceiling_usd: float, facts: RequestFacts,
               prices_per_m: Sequence[tuple[float, float]],
               windows: Sequence[int | None] = ()) -> int | None:
    """The most output tokens per completion that keeps the request within `ceiling_usd` on
    every deployment of `prices_per_m` ((input, output) USD per million tokens), for a request
    that set no limit of its own: sent upstream, it makes the ceiling a cap on what the request
    can cost, not only on what it was guessed to (`DEFAULT_MAX_OUTPUT_TOKENS` priced it). None
    when no deployment charges for output. It is never more than the room the prompt leaves in
    any of the deployments' context `windows` (None: not configured): a limit past the window
    is refused by the provider (`context_length_exceeded`), though the request fitted. The
    room keeps a slack for what the prompt estimate may miss (`window_room`)."""
    caps = [math.floor((ceiling_usd * 1e6 - facts.prompt_tokens * price_in)
                       / (facts.completions * price_out))
            for price_in, price_out in prices_per_m if price_out > 0]
    if not caps:
        return None
    caps += [window_room(window, facts.prompt_tokens) for window in windows if window is not None]
    return max(1, min(caps))


def window_room(window: int, prompt_tokens: int) -> int:
    """Output tokens a context `window` leaves after a prompt estimated at `prompt_tokens`,
    less a slack of 16 tokens plus 3% of the prompt: the chat template's tokens the estimate
    does not see (OpenAI adds 3 to prime the reply) and each message's rounding."""
    return window - prompt_tokens - (16 + prompt_tokens // 32)


def pinned_verdicts(policy: TaskPolicy, facts: RequestFacts,
                    deployments: Sequence[DeploymentFacts]) -> tuple[Verdict, ...]:
    """For a request that names its model: each of the model's deployments, in order, judged
    by the risk rule alone (the one check pinning does not skip when so configured)."""
    return tuple(Verdict(d.model, d.name, Role.PINNED, (risk_check(policy, facts, d),),
                         worst_case_cost(facts, d)) for d in deployments)


def evaluate(policy: TaskPolicy, facts: RequestFacts,
             deployments: Mapping[str, Sequence[DeploymentFacts]],
             quality: QualityTable) -> tuple[Verdict, ...]:
    """A verdict for every deployment of every candidate and fallback model, in policy order."""
    roles = [(m, Role.CANDIDATE) for m in policy.candidates]
    roles += [(m, Role.FALLBACK) for m in policy.fallbacks if m not in policy.candidates]
    verdicts = []
    for model, role in roles:
        floor = floor_check(policy.quality_floor, model, facts.task, quality)
        for deployment in deployments.get(model, ()):
            output = facts.max_output_tokens  # `output_tokens`, without a call per check
            if deployment.max_output_tokens is not None and deployment.max_output_tokens < output:
                output = deployment.max_output_tokens
            cost = _cost(facts, deployment, output)
            checks = (floor, risk_check(policy, facts, deployment),
                      _fits(facts, deployment, output),
                      Check(CheckName.HEALTHY, deployment.healthy,
                            "healthy" if deployment.healthy else "circuit open"),
                      _budget(policy, cost))
            verdicts.append(Verdict(model, deployment.name, role, checks, cost))
    return tuple(verdicts)
