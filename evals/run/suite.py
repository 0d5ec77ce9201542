"""The eval suite file: what to ask, how to grade it, and for which task the result counts.

A suite is a YAML (or JSON) mapping validated here with `extra="forbid"`: name, version, task,
metric, the grader (a discriminated union on `type`), optional judge settings, extra request
fields, and the items, inline (`items`) or in a JSONL file (`items_file`, relative to the suite
file, `.gz` allowed). An item holds a `prompt` or `messages`, the `expected` value, and may
override the grader. `expect_marker: true` makes a simulator variant: the runner appends
`<<expect:VALUE>>` (the item's `simulated_answer`, else `expected`) to the last user message.
Loading only reads and validates; nothing here sends a request.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from jsonschema import Draft202012Validator, SchemaError
from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from policies import yaml_strict
from policies.config_model import ConfigModel
from policies.labels import Task


class _Frozen(ConfigModel):
    """Numbers and booleans are not read as one another (`abs_tol: true` is no tolerance of 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ExactGrader(_Frozen):
    """Pass when the answer equals the expected text (after strip, optionally case-folded)."""

    type: Literal["exact"] = "exact"
    case_sensitive: bool = False


class ChoiceGrader(_Frozen):
    """Pass when the first standalone letter A-E of the answer is the expected letter."""

    type: Literal["choice"] = "choice"
    letters: str = Field(default="ABCDE", min_length=2)


class NumericGrader(_Frozen):
    """Pass when the last number in the answer is within tolerance of the expected number."""

    type: Literal["numeric"] = "numeric"
    abs_tol: float = Field(default=1e-6, ge=0)
    rel_tol: float = Field(default=0.0, ge=0)


class RegexGrader(_Frozen):
    """Pass when the pattern (the grader's, else the item's `expected`) is found in the answer."""

    type: Literal["regex"] = "regex"
    pattern: str | None = None
    ignore_case: bool = False
    full_match: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        problem = None if pattern is None else regex_problem(pattern)
        if problem is not None:
            raise ValueError(problem)
        return pattern


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` is no regular expression Python compiles (None: it is one)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression {pattern!r}: {exc}"
    return None


class JsonSchemaGrader(_Frozen):
    """Pass when the answer is JSON valid against the schema.

    `extract`: `whole` (the answer is JSON), `fenced` (or a ```json block), `embedded` (or the
    outermost braces/brackets inside prose).
    """

    type: Literal["json_schema"] = "json_schema"
    json_schema: dict[str, Any] = Field(alias="schema")
    extract: Literal["whole", "fenced", "embedded"] = "fenced"

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"invalid JSON schema: {exc.message}") from exc
        return schema


class JudgeGrader(_Frozen):
    """Ask the suite's judge model; the rubric is the item-independent part of its prompt."""

    type: Literal["judge"] = "judge"
    rubric: str = Field(min_length=1)


GraderSpec = (ExactGrader | ChoiceGrader | NumericGrader | RegexGrader | JsonSchemaGrader
              | JudgeGrader)
Grader = Annotated[GraderSpec, Field(discriminator="type")]


class JudgeSettings(_Frozen):
    """How the judge is asked and how its reply is read."""

    model: str | None = None  # a logical model of the config; `--judge-model` overrides
    verdict: Literal["pass_fail", "score"] = "pass_fail"
    max_score: float = Field(default=10.0, gt=0)
    pass_score: float = Field(default=7.0, ge=0)
    max_tokens: int = Field(default=256, ge=1)


class Message(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class Item(_Frozen):
    id: str = Field(min_length=1)
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    expected: str | None = None
    simulated_answer: str | None = None
    grader: Grader | None = None

    @model_validator(mode="after")
    def _one_input(self) -> Item:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("an item needs exactly one of `prompt` and `messages`")
        if self.messages is not None and not any(m.role == "user" for m in self.messages):
            raise ValueError("`messages` needs at least one user message")
        return self


class Suite(_Frozen):
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    task: Task
    metric: str = Field(default="accuracy", min_length=1)
    description: str = ""
    source: str = ""
    system: str | None = None
    prompt_template: str = "{prompt}"
    request: dict[str, Any] = Field(default_factory=dict)
    grader: Grader
    judge: JudgeSettings | None = None
    expect_marker: bool = False
    items_file: str | None = None
    items: tuple[Item, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Suite:
        if "{prompt}" not in self.prompt_template:
            raise ValueError("`prompt_template` must contain {prompt}")
        forbidden = sorted({"messages", "model", "stream"} & set(self.request))
        if forbidden:
            raise ValueError(f"`request` may not set {forbidden}")
        graders = [self.grader, *(i.grader for i in self.items if i.grader is not None)]
        if any(g.type == "judge" for g in graders) and self.judge is None:
            raise ValueError("a judge grader needs the suite's `judge` settings")
        return self


class SuiteError(ValueError):
    """The suite file cannot be read or is invalid; the message lists every problem."""


def _text(path: Path) -> str:
    """The file as UTF-8 text (gunzipped for `.gz`); SuiteError naming the file when it cannot
    be read, is a cut or corrupt gzip file, or is not UTF-8 (each was a traceback)."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (EOFError, zlib.error) as exc:  # EOFError: a cut download, not an OSError
        raise SuiteError(f"{path}: not a complete gzip file ({exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SuiteError(f"{path} line {line}: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None


def _read_jsonl(path: Path) -> list[Any]:
    """The JSON values of the file's non-blank lines; SuiteError naming file and line."""
    values = []
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{path} line {number}: not JSON ({exc.msg})") from None
    return values


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                     for e in error.errors())


def load_suite(path: Path) -> Suite:
    """Read, validate and inline a suite file (its `items_file` joins `items`)."""
    try:
        raw = yaml_strict.safe_load(_text(path))
    except yaml.YAMLError as exc:  # its message spans lines: one line, as every other error
        raise SuiteError(f"{path}: {' '.join(str(exc).split())}") from exc
    if not isinstance(raw, dict):
        raise SuiteError(f"{path}: a suite file holds a mapping at the top level")
    items = list(raw.get("items") or [])
    if raw.get("items_file"):
        items_path = path.parent / str(raw["items_file"])
        if not items_path.is_file():
            raise SuiteError(f"{path}: items_file {items_path}: no such file")
        items += _read_jsonl(items_path)
    try:
        suite = Suite.model_validate({**raw, "items": items})
    except ValidationError as exc:
        raise SuiteError(f"{path}: {_problems(exc)}") from exc
    if not suite.items:
        raise SuiteError(f"{path}: the suite has no items")
    duplicates = sorted(name for name, n in Counter(i.id for i in suite.items).items() if n > 1)
    if duplicates:
        raise SuiteError(f"{path}: duplicate item ids {duplicates[:5]}")
    return suite


def ungradable_items(suite: Suite) -> str | None:
    """Which items the suite's graders would refuse while grading, one line (None: none): a
    numeric item whose `expected` is no number, no `expected` where the grader needs one, an
    `expected` regex that does not compile, a choice letter outside `letters`. `eval run`
    checks this before its first call: grading raised after every call was paid for."""
    from evals.run.graders import item_problem  # graders imports this module

    found = []
    for item in suite.items:
        problem = item_problem(grader_of(suite, item), item.expected)
        if problem is not None:
            found.append(f"item {item.id!r}: {problem}")
    if not found:
        return None
    return f"{len(found)} item(s) its grader cannot grade: {_listed(found)}"


def suite_hash(suite: Suite) -> str:
    """The suite's content hash (items inlined), 12 hex digits: what an eval report records."""
    canonical = json.dumps(suite.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _input_key(item: Item) -> str:
    """What the item asks, whitespace-trimmed: its prompt, else its messages."""
    if item.prompt is not None:
        return item.prompt.strip()
    return json.dumps([[m.role, m.content.strip()] for m in item.messages or ()])


def _listed(found: list[str], shown: int = 5) -> str:
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return "; ".join(found[:shown]) + more


def repeated_items(suites: Sequence[Suite]) -> list[str]:
    """Suites, or items, given more than once in one run: each repeat would count again in n
    and narrow the interval. An item repeats by id (across suites) or by what it asks (the
    prompt, else the messages; within a suite too)."""
    names = Counter(s.name for s in suites)
    twice = [f"{name} ({count} times)" for name, count in names.items() if count > 1]
    if twice:
        return [f"suite given more than once: {', '.join(twice)}"]
    by_id: dict[str, str] = {}
    by_input: dict[str, tuple[str, str]] = {}
    same_id, same_input = [], []
    for suite in suites:
        for item in suite.items:
            other = by_id.setdefault(item.id, suite.name)
            if other != suite.name:
                same_id.append(f"{item.id} in {other} and {suite.name}")
            key = _input_key(item)
            first = by_input.setdefault(key, (suite.name, item.id))
            if first != (suite.name, item.id):
                same_input.append(f"{suite.name} item {item.id} asks what {first[0]} item "
                                  f"{first[1]} asks")
    found = []
    if same_id:
        found.append(f"item ids repeated across suites ({len(same_id)}): {_listed(same_id)}")
    if same_input:
        found.append(f"prompts repeated ({len(same_input)}): {_listed(same_input)}")
    return found


def item_messages(suite: Suite, item: Item) -> list[dict[str, str]]:
    """The chat messages sent for an item (with the expect marker in simulator suites)."""
    if item.messages is not None:
        messages = [{"role": m.role, "content": m.content} for m in item.messages]
    else:
        messages = [{"role": "user",
                     "content": suite.prompt_template.replace("{prompt}", item.prompt or "")}]
    if suite.system is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": suite.system})
    if suite.expect_marker:
        value = item.simulated_answer if item.simulated_answer is not None else item.expected
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        messages[last] = {**messages[last],
                          "content": f"{messages[last]['content']}\n<<expect:{value or ''}>>"}
    return messages


def grader_of(suite: Suite, item: Item) -> GraderSpec:
    """The item's grader, else the suite's."""
    return item.grader if item.grader is not None else suite.grader
