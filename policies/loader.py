"""Loading and validating configuration files: YAML → `RouterConfig`, with every problem listed.

`load_config_text` validates the schema, then the cross-references (route → model →
deployment) and the lists whose entries are identified by name (deployments, models, a model's
deployments, a policy's candidates and fallbacks, API keys, experiments), where a name listed
twice is ambiguous; it raises `PolicyValidationError` naming all problems at once.
`content_hash` gives the version stamped on every decision: a hash of the canonical JSON of the
validated config's routing part, so comments and key order do not change it, and neither do the
sections that cannot change an answer (`NOT_ROUTING`).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
import typing
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from policies import yaml_strict
from policies.experiments import ExperimentSpec
from policies.schema import PATTERN_MEANINGS, ApiKeySpec, RouterConfig, TaskPolicy


class PolicyValidationError(ValueError):
    """The configuration is invalid; `problems` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


def validation_problems(error: ValidationError, model: type[BaseModel] = RouterConfig,
                        reference: str = "docs/configuration.md") -> list[str]:
    """One line per problem of a file validated as `model` (`where: what`), in words: the
    config's, and the simulator's profile files' (`reference`: the page that lists `model`'s
    settings, named where a setting is written in the wrong section)."""
    items = error.errors()

    def inside(item: Any) -> bool:
        """Another problem lies within this item's location (an item of its list failed)."""
        loc = tuple(item["loc"])
        return any(tuple(other["loc"][:len(loc)]) == loc and len(other["loc"]) > len(loc)
                   for other in items)

    problems = []
    for item in items:
        # pydantic checks a list's `min_length` on the items that validated, so a list whose
        # only item failed is also "too short ... not 0": a consequence, not a second problem.
        if item["type"] == "too_short" and inside(item):
            continue
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        problems.append(f"{where}: {_wording(item, model, reference)}")
    return problems


def _wording(item: Any, model: type[BaseModel], reference: str) -> str:
    """pydantic's message, but for a pattern the config uses: what the pattern means, not the
    regular expression (a Persian deployment name read `String should match pattern '^[A-Z…'`);
    and for a setting no section has, the setting it most resembles (`max_cost_per_request`:
    did you mean `max_cost_per_request_usd`?)."""
    if item["type"] == "string_pattern_mismatch":
        meaning = PATTERN_MEANINGS.get(item.get("ctx", {}).get("pattern"))
        if meaning is not None:
            return f"not {meaning}"  # the value is not quoted: it may be a key written inline
    if item["type"] == "string_type" and isinstance(item.get("input"), bool):
        # YAML 1.1 reads an unquoted yes/no/on/off (`tenant: NO`, Norway's code) as a boolean
        return f"{item['msg']}: YAML read it as {item['input']!r}; quote the value"
    if item["type"] == "string_type" and isinstance(item.get("input"), int | float | date):
        # `api_version: 2024-10-21` as Azure's docs write it, `salt: 2026`: not echoed (the
        # field may be one a reader should not see whole), the kind is enough to see why
        kind = "a date" if isinstance(item["input"], date) else "a number"
        return f"{item['msg']}: YAML read it as {kind}; quote the value"
    if item["type"] == "extra_forbidden" and item["loc"]:
        written = str(item["loc"][-1])
        if written in _setting_names(model):  # a real setting, in the wrong place
            return f"{item['msg']}: {written!r} is a setting of another section ({reference})"
        close = difflib.get_close_matches(written, _setting_names(model), n=1, cutoff=0.75)
        if close:
            return f"{item['msg']}: did you mean {close[0]!r}?"
    if item["type"] in ("tuple_type", "list_type", "set_type"):
        # pydantic's "Input should be a valid tuple" for `candidates: small`: YAML has lists
        return "should be a list (`[a, b]`, or one `- item` a line)"
    return str(item["msg"])


@functools.cache
def _setting_names(root: type[BaseModel]) -> tuple[str, ...]:
    """Every setting name of the sections of a file read as `root` (for suggestions)."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = [root]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            names.add(field.alias or name)
            pending += _models_in(field.annotation)
    return tuple(sorted(names))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names, through unions, containers and mappings."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _duplicates(where: str, kind: str, names: Iterable[str]) -> list[str]:
    """One problem per name that the list at `where` holds more than once."""
    return [f"{where}: {kind} {name!r} appears {n} times"
            for name, n in Counter(names).items() if n > 1]


def _duplicate_keys(keys: tuple[ApiKeySpec, ...]) -> list[str]:
    """The same client key (env reference or digest) in two entries: which tenant it maps to
    would depend on the order of the list. Keys held in two variables with the same value are
    found when the secrets are resolved (`router.runtime_config`)."""
    entries: dict[str, list[int]] = {}
    for index, spec in enumerate(keys):
        written = spec.key if spec.key is not None else f"key_sha256 {spec.key_sha256}"
        entries.setdefault(written, []).append(index)
    return [f"api_keys: {written} appears in entries {', '.join(map(str, at))}; "
            "a key maps to one tenant" for written, at in entries.items() if len(at) > 1]


def cross_reference_problems(config: RouterConfig) -> list[str]:
    """Every dangling or duplicate reference in an otherwise valid config."""
    deployments = {d.name for d in config.deployments}
    models = {m.name for m in config.models}
    problems = _duplicates("deployments", "deployment", [d.name for d in config.deployments])
    problems += _duplicates("models", "model", [m.name for m in config.models])
    problems += _duplicate_keys(config.api_keys)
    for model in config.models:
        problems += _duplicates(f"models.{model.name}.deployments", "deployment",
                                model.deployments)
        problems += [
            f"models.{model.name}: unknown deployment {name!r}"
            for name in model.deployments
            if name not in deployments
        ]
    targets = [("routes.default_model", config.routes.default_model)]
    if config.routes.default_model is None:
        targets.clear()
        if config.policies is None:
            problems.append("routes.default_model: required without a policies section (the "
                            "model `auto` routes a task to when routes.by_task names none)")
    targets += [(f"routes.by_task.{task}", name) for task, name in config.routes.by_task.items()]
    problems += [f"{where}: unknown model {name!r}" for where, name in targets
                 if name not in models]
    problems += _policy_problems(config, models)
    problems += _experiment_problems(config, models)
    problems += [
        f"routes.aliases: {alias!r} collides with a model name"
        for alias in config.routes.aliases
        if alias in models
    ]
    return problems


_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPENING = re.compile(r"\$\{")


def interpolate(text: str, environ: Mapping[str, str], source: str) -> str:
    """Replace `${NAME}` with the environment's value (for addresses, not secrets). Any other
    `${...}` (a shell default `${NAME:-x}`, a typo) is refused, not left in place: it would
    otherwise reach an address or a name as literal text. Only the line is named, as what
    follows may be a credential. A name not set, or set to an empty (or blank) value, is
    refused."""
    unsupported = [text.count("\n", 0, match.start()) + 1 for match in _OPENING.finditer(text)
                   if not _PLACEHOLDER.match(text, match.start())]
    if unsupported:
        raise PolicyValidationError(source, [
            f"line {line}: only ${{NAME}} is substituted (a name of letters, digits and "
            "underscores; no default, no other shell form)" for line in unsupported])
    first_line: dict[str, int] = {}  # each name's first use, to point at it
    for match in _PLACEHOLDER.finditer(text):
        first_line.setdefault(match.group(1), text.count("\n", 0, match.start()) + 1)
    missing = sorted(name for name in first_line if name not in environ)
    if missing:
        raise PolicyValidationError(source, [
            f"line {first_line[name]}: ${{{name}}} is used but not set in the environment"
            for name in missing])
    # An empty value (Compose's `${X}` of an unset X, a Helm value left blank) made the setting
    # YAML null, which every optional setting reads as its default: no cost ceiling, no
    # per-tenant cap, per-process idempotency and statistics, started without a word.
    empty = sorted(name for name in first_line if not environ[name].strip())
    if empty:
        raise PolicyValidationError(source, [
            f"line {first_line[name]}: ${{{name}}} is set but empty: an empty value would turn "
            "its setting off (null); give it a value, or remove the setting" for name in empty])
    # The text is substituted before YAML reads it: a value holding a line break or ` #`
    # (a comment to YAML) ended the setting there, and the rest of its line was dropped.
    breaking = sorted(name for name in first_line
                      if "\n" in environ[name] or "\r" in environ[name]
                      or " #" in environ[name] or "\t#" in environ[name])
    if breaking:
        raise PolicyValidationError(source, [
            f"line {first_line[name]}: ${{{name}}}'s value holds a line break or ' #', which "
            "YAML would read as the end of the setting (a comment, or a new line): ${NAME} is "
            "for addresses and names; a key is referenced as env:NAME" for name in breaking])
    return _PLACEHOLDER.sub(lambda m: environ[m.group(1)], text)


def _policy_problems(config: RouterConfig, models: set[str]) -> list[str]:
    if config.policies is None:
        return []
    named = [("default", config.policies.default)]
    named += [(f"tasks.{task}", policy) for task, policy in config.policies.tasks.items()]
    holders = {d: m.name for m in config.models for d in m.deployments}
    problems = []
    for where, policy in named:
        problems += _ordered_list_duplicates(f"policies.{where}", policy)
        refs = [("candidates", n) for n in policy.candidates]
        refs += [("fallbacks", n) for n in policy.fallbacks]
        if policy.no_candidate_fallback is not None:
            refs.append(("no_candidate_fallback", policy.no_candidate_fallback))
        if policy.quality_floor is not None and policy.quality_floor.relative_to is not None:
            refs.append(("quality_floor.relative_to", policy.quality_floor.relative_to))
        for level, rule in policy.risk.items():
            refs += [(f"risk.{level}.candidates", n) for n in rule.candidates or ()]
        problems += [f"policies.{where}.{field}: unknown model {name!r}"
                     + (f" (a deployment: name its model, {holders[name]!r})"
                        if name in holders else "")
                     for field, name in refs if name not in models]
    return problems


def _ordered_list_duplicates(where: str, policy: TaskPolicy) -> list[str]:
    """Candidates and fallbacks are ordered lists (fallbacks are tried in their order, and
    candidates in theirs under `min_latency`): a model listed twice has no single place in
    its list. A risk rule's `candidates` is a set of allowed models, where a repeat changes
    nothing, so it is not checked."""
    return (_duplicates(f"{where}.candidates", "model", policy.candidates)
            + _duplicates(f"{where}.fallbacks", "model", policy.fallbacks))


def _experiment_problems(config: RouterConfig, models: set[str]) -> list[str]:
    problems = _duplicates("experiments", "experiment", [e.name for e in config.experiments])
    for experiment in config.experiments:
        for arm in experiment.arms:
            kind, _, target = arm.route.partition(":")
            if kind == "model" and target in models:
                if config.policies is None:  # an arm narrows a policy's candidates: none here
                    problems.append(f"experiments.{experiment.name}.arms.{arm.name}.route: "
                                    f"{arm.route!r} needs a `policies` section (an arm narrows "
                                    "a task policy's candidates to its model; without "
                                    "policies every request takes the routes' default)")
                continue
            if arm.route == "policy:default":
                continue
            where = f"experiments.{experiment.name}.arms.{arm.name}.route"
            if kind == "model" and target:
                problems.append(f"{where}: unknown model {target!r}")
                continue
            problems.append(f"{where}: {arm.route!r} is neither 'policy:default' nor "
                            "'model:<model>'")
    return problems + _shadowed_experiments(config.experiments)


# Units every request carries: an experiment on one of them takes every request of its tasks.
_ALWAYS_PRESENT_UNITS = frozenset({"request", "tenant"})


def _overlap(first: ExperimentSpec, second: ExperimentSpec) -> bool:
    """Whether the two experiments' [start, stop) intervals share a moment."""
    starts_before = first.start is None or second.stop is None or first.start < second.stop
    ends_after = first.stop is None or second.start is None or second.start < first.stop
    return starts_before and ends_after


def _shadowed_experiments(specs: Sequence[ExperimentSpec]) -> list[str]:
    """A request joins the first running experiment for its task that has its unit id
    (`policies.experiments.Assigner`): a later one on the same task, running at the same time,
    whose unit the earlier one also uses (or whose earlier one's unit every request carries),
    never gets a request of that task: it used to load and report zero requests without a
    word. (With another unit, the later one gets the requests without the earlier one's unit
    id, e.g. anonymous ones: allowed, docs/experiments.md.)"""
    problems: list[str] = []
    for i, later in enumerate(specs):
        for earlier in specs[:i]:
            shadows = earlier.unit == later.unit or earlier.unit in _ALWAYS_PRESENT_UNITS
            shared = [task for task in later.tasks if task in earlier.tasks]
            if shadows and shared and _overlap(earlier, later):
                problems.append(
                    f"experiments.{later.name}.tasks: {shared} are also in experiment "
                    f"{earlier.name!r} (unit {earlier.unit}), listed first and running at the "
                    "same time, which takes every such request: give them other tasks or "
                    "non-overlapping start/stop")
    return problems


def load_config_text(text: str, source: str = "<config>",
                     environ: Mapping[str, str] | None = None) -> RouterConfig:
    try:
        config = RouterConfig.model_validate(_read_yaml(text, source, environ or {}))
    except ValidationError as exc:
        raise PolicyValidationError(source, validation_problems(exc)) from exc
    return _cross_referenced(config, source)


def _read_yaml(text: str, source: str, environ: Mapping[str, str]) -> dict[str, Any]:
    text = interpolate(text, environ, source)
    try:
        raw = yaml_strict.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyValidationError(source, [yaml_problem(exc)]) from exc
    if not isinstance(raw, dict):
        raise PolicyValidationError(source, ["the file must hold a mapping at the top level"])
    return raw


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line, by line and column of the file (its own text named the file
    `<unicode string>`, over four lines)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"not valid YAML: {' '.join(str(exc).split())}"
    mark = exc.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    context = ""
    if exc.context and exc.context_mark is not None:
        context = (f" ({exc.context} that starts at line {exc.context_mark.line + 1}, "
                   f"column {exc.context_mark.column + 1})")
    return f"{where}: not valid YAML: {exc.problem}{context}"


def _cross_referenced(config: RouterConfig, source: str) -> RouterConfig:
    problems = cross_reference_problems(config)
    if problems:
        raise PolicyValidationError(source, problems)
    return config


def load_config_file(path: Path, environ: Mapping[str, str] | None = None, *,
                     unset_stand_in: bool = False) -> RouterConfig:
    """`unset_stand_in`: a `${NAME}` the environment does not set takes a stand-in of its
    place's kind (`stand_ins`) instead of being an error (`policy check`, `explain`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyValidationError(str(path), [
            f"not UTF-8 text (byte {exc.start} cannot start or continue a character)"]) from exc
    environ = environ if environ is not None else {}
    if unset_stand_in:
        return _load_with_stand_ins(text, str(path), environ)
    return load_config_text(text, str(path), environ)


# What a whole-value stand-in becomes when the field refuses a word: pydantic's error types
# for a field that wants a number, and for one that wants a boolean (`ConfigModel`'s own).
_WANTS_NUMBER = frozenset({"int_parsing", "float_parsing", "decimal_parsing"})
_WANTS_BOOLEAN = frozenset({"bool_parsing", "number_boolean_crossed"})


def _load_with_stand_ins(text: str, source: str, environ: Mapping[str, str]) -> RouterConfig:
    """The config with `stand_ins` for unset names. A whole value stands in as a word first
    (any text field takes it); where the field refuses the word for wanting a number or a
    boolean, that name is given 1 or false and the config read again."""
    values = stand_ins(text, environ)
    names_of = {value: name for name, value in values.items()}
    for _ in range(len(values) + 1):
        try:
            config = RouterConfig.model_validate(
                _read_yaml(text, source, {**values, **environ}))
        except ValidationError as exc:
            retyped = {names_of[err["input"]]: "1" if err["type"] in _WANTS_NUMBER else "false"
                       for err in exc.errors()
                       if isinstance(err["input"], str) and err["input"] in names_of
                       and err["type"] in _WANTS_NUMBER | _WANTS_BOOLEAN}
            if not retyped:
                raise PolicyValidationError(source, validation_problems(exc)) from exc
            values.update(retyped)
            continue
        return _cross_referenced(config, source)
    raise AssertionError("each round retypes at least one stand-in")  # pragma: no cover


# A placeholder that starts a key's value (`key: ${NAME}...`, quoted or not, block or flow
# style); group 3 is empty when it is the whole value.
_VALUE_START = r"([A-Za-z_]\w*)\s*:\s*([\"']?)\$\{{{name}\}}(\2\s*(?:$|[,}}\]#]))?"
_URL_KEYS = ("url", "base", "endpoint")


def stand_ins(text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """A value for each `${NAME}` of `text` that `environ` does not set, shaped for where it
    stands, so that the check judges the rest of the config and not the stand-in: a Redis URL
    as a whole `*redis_url`, an http URL at the start of any other URL, base or endpoint
    (`${BASE}/v1` too), and a plain word anywhere else (a directory, the password of
    `redis://:${PASSWORD}@host`, a comment; `_load_with_stand_ins` turns a whole value into a
    number or a boolean where its field wants one). A name used in several places takes the
    first of these shapes that any of its places asks for."""
    shapes: dict[str, set[int]] = {}
    for line in text.splitlines():
        for match in _PLACEHOLDER.finditer(line):
            name = match.group(1)
            if name in environ:
                continue
            start = re.search(_VALUE_START.format(name=re.escape(name)), line)
            key = start.group(1).lower() if start else ""
            whole = start is not None and start.group(3) is not None
            if whole and key.endswith("redis_url"):
                shape = 0
            elif start and any(part in key for part in _URL_KEYS):
                shape = 1
            else:
                shape = 2
            shapes.setdefault(name, set()).add(shape)
    values = {}
    for name, found in shapes.items():
        word = f"unset-{name.lower().replace('_', '-')}"
        values[name] = (f"redis://{word}.invalid:6379/0", f"http://{word}.invalid",
                        word)[min(found)]
    return values


# Settings that change who may call and how the process runs, never which model answers what or
# for how long an answer may be reused: API keys (tenant and scopes are in every cache key on
# their own), where a deployment is reached and with which credential (its `model` names what
# answers; the embedded default's simulator listens on a new port at every start, which must not
# strand the cache) and its timeouts and in-flight cap, telemetry, and the server's limits,
# timeouts, reliability and statistics settings and where its caches live. Everything else, the
# cache rules (`server.cache.default`) included, and any setting added later is part of the
# policy version: editing it makes cached answers unreachable.
NOT_ROUTING: dict[str, Any] = {
    "api_keys": True,
    "deployments": {"__all__": {"api_base": True, "api_key": True, "api_version": True,
                                "timeout_s": True, "connect_timeout_s": True,
                                "max_in_flight": True}},
    "telemetry": True,
    # An experiment's guardrails, metrics, dates and sequential settings decide what is measured
    # and when it stops, never what an arm's route answers (its arm is in the cache key).
    "experiments": {"__all__": {"start": True, "stop": True, "guardrails": True,
                                "metrics": True, "sequential": True}},
    "server": {
        "max_body_bytes": True, "max_body_bytes_in_flight": True, "request_timeout_s": True,
        "shutdown_grace_s": True,
        "reliability": True, "stats": True,
        "experiments_redis_url": True, "idempotency_redis_url": True,
        "idempotency_memory_mb": True, "idempotency_lease_s": True,
        "cache": {"backend": True, "directory": True, "disk_size_limit_mb": True,
                  "redis_url": True, "prefix_affinity": True},
    },
}


def config_hash(config: RouterConfig) -> str:
    """Every setting of the config, 12 hex digits: what `/readyz` and `serve`'s start-up line
    show beside the policy version, to tell replicas of two configs apart when only settings
    left out of the policy version differ (a re-pointed `api_base`, keys, timeouts)."""
    canonical = json.dumps(config.model_dump(mode="json", exclude_none=True), sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def content_hash(config: RouterConfig, *extra_parts: str) -> str:
    """The policy version: the config but `NOT_ROUTING`, plus artifact hashes such as the
    classifier's, as 12 hex digits. Fields that are null are left out: an upgrade adding an
    optional field (null by default, as `max_output_tokens`) leaves every existing config's
    version as it was, where hashing the null changed them all and stranded every cached
    answer. A field set, or a default that is not null, still counts."""
    routing = config.model_dump(mode="json", exclude=NOT_ROUTING, exclude_none=True)
    canonical = json.dumps(routing, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode())
    for part in extra_parts:
        digest.update(b"\x00" + part.encode())
    return digest.hexdigest()[:12]
