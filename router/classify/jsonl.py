"""`slorouter classify` input and output: JSON lines in, one JSON line out per input.

An input line is `{"text": ...}` or `{"messages": [...]}` with optional `tools` (wire tool
objects, or plain names as in the training data), `response_format`, `hints`
(`{"task", "risk"}`) or `metadata.task` (a hint when it names a task), and `id`. Output lines
carry the input's line number (and id) so they can be matched to inputs; malformed lines are
reported on the error stream as `line N: why` and make the exit code 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from policies.labels import TASKS, Risk, Task
from router.classify.classifier import Explanation, LinearClassifier
from router.classify.types import Hints, RequestView
from router.classify.view import view_from_openai
from router.errors import RequestError
from router.validation import one_line


class HintsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: Task | None = None
    risk: Risk | None = None


class ClassifyInput(BaseModel):
    """One input line."""

    model_config = ConfigDict(extra="ignore")

    id: str | int | None = None
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[Any] | None = None  # tool objects or names: wire_tools says which is bad
    response_format: dict[str, Any] | None = None
    hints: HintsIn | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ClassifyInput:
        if (self.text is None) == (self.messages is None):
            raise ValueError("give exactly one of 'text' and 'messages'")
        return self

    def view(self) -> RequestView:
        messages: list[dict[str, object]] = [{"role": "user", "content": self.text}]
        if self.messages is not None:
            messages = [dict(m) for m in self.messages]
        return view_from_openai(messages, wire_tools(self.tools), self.response_format)

    def request_hints(self) -> Hints:
        """`hints.task` (the service's `x-slorouter-task` header), else `metadata.task` when it
        names a task; both naming different tasks is a RequestError, as the service answers
        such a request with a 400 `conflicting_hint` (the hint used to win silently)."""
        task = self.hints.task if self.hints is not None else None
        listed = metadata_task(self.metadata)
        if task is None:
            task = listed
        elif listed is not None and listed != task:
            raise RequestError(f"conflicting task hints: hints.task is {task!r} but "
                               f"metadata.task is {listed!r}; give one of them, or the same "
                               "value in both", param="metadata.task", code="conflicting_hint")
        return Hints(task=task, risk=self.hints.risk if self.hints is not None else None)


def metadata_task(metadata: dict[str, Any] | None) -> Task | None:
    """The task `metadata.task` names, None when it names none: `metadata` is the client's own
    set of tags in OpenAI's API (`{"task": "ticket-triage"}`), so such a value is no hint at
    all, as the service reads it (`pipeline.hints_from`); the line was refused as malformed."""
    value = metadata.get("task") if metadata is not None else None
    return next((task for task in TASKS if value is not None and task == str(value)), None)


def wire_tools(tools: list[Any] | None) -> list[dict[str, object]] | None:
    """`tools` in the wire form the service reads, a plain name (`"get_weather"`, as the
    classifier's training rows declare tools) as a function tool of that name: the name then
    goes through what a request's does (invisible characters dropped, read verb-first).
    Anything else is a RequestError naming both forms (pydantic's union error named only the
    first: `tools.0.dict[str,any]: Input should be an object`, though a name would do)."""
    if tools is None:
        return None
    wire: list[dict[str, object]] = []
    for index, tool in enumerate(tools):
        if isinstance(tool, str):
            tool = {"type": "function", "function": {"name": tool}}
        elif not isinstance(tool, dict):
            kind = ("null" if tool is None else "a boolean" if isinstance(tool, bool)
                    else "a number" if isinstance(tool, int | float) else "an array")
            raise RequestError(f"tools[{index}] must be a tool object or a tool name (a "
                               f"string), not {kind}", param="tools")
        if not _named(tool):
            raise RequestError(f"tools[{index}] needs a name of 1-{MAX_TOOL_NAME} characters, "
                               "as the service does (it refuses the request with a 400)",
                               param="tools")
        wire.append(dict(tool))
    return wire


# The longest tool name the service takes (`router.api.schemas.FunctionSpec`).
MAX_TOOL_NAME = 128


def _named(tool: dict[str, Any]) -> bool:
    """Whether a wire tool has a name the service would take: its `function`'s (or `custom`'s,
    for a custom tool) `name`, a string of 1-128 characters."""
    spec = tool.get("custom" if tool.get("type") == "custom" else "function")
    name = spec.get("name") if isinstance(spec, dict) else None
    return isinstance(name, str) and 0 < len(name) <= MAX_TOOL_NAME


def output_record(line: int, item_id: str | int | None, ex: Explanation) -> dict[str, object]:
    """The JSON object written for one classified input."""
    labels = ex.labels
    record: dict[str, object] = {"line": line}
    if item_id is not None:
        record["id"] = item_id
    record |= {
        "task": labels.task,
        "risk": labels.risk,
        "task_source": labels.task_source,
        "task_probs": {k: round(v, 4) for k, v in labels.task_probs.items()},
        "risk_probs": {k: round(v, 4) for k, v in labels.risk_probs.items()},
        "signals": sorted(labels.signals),
        "jailbreak_prob": round(ex.p_jailbreak, 4),
        "pii_kinds": sorted(ex.pii_kinds),
        "side_effect_tools": list(ex.side_effect_tools),
    }
    return record


def classify_stream(
    lines: Iterable[str | bytes], out: TextIO, err: TextIO,
    classifier: LinearClassifier,
) -> int:
    """Classify every line; 0 when all lines were valid, 1 when any was malformed (bytes that
    are not UTF-8 included)."""
    bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = ClassifyInput.model_validate_json(line)
            ex = classifier.explain(item.view(), item.request_hints())
        except ValidationError as exc:
            bad += 1
            print(f"line {number}: {one_line(exc)}", file=err)
            continue
        except RequestError as exc:
            bad += 1
            print(f"line {number}: {exc.message}", file=err)
            continue
        out.write(json.dumps(output_record(number, item.id, ex), ensure_ascii=False) + "\n")
    if bad:
        print(f"{bad} malformed line(s)", file=err)
    return 1 if bad else 0
