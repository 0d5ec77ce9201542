"""What the classifier sees of a request, and what it answers.

Plain frozen values shared by the service (which builds a `RequestView` from the wire request)
and the classifier implementation (which returns `Labels`). No behaviour lives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from policies.labels import Risk, Signal, Task


@dataclass(frozen=True, slots=True)
class RequestView:
    """The routing-relevant view of one chat request.

    `messages` holds (role, text) pairs; text content parts are joined with newlines and
    non-text parts (images, audio) are left out.
    """

    messages: tuple[tuple[str, str], ...]
    tool_names: tuple[str, ...] = ()
    tool_descriptions: tuple[str, ...] = ()
    response_format: str | None = None  # "text" | "json_object" | "json_schema" | None


@dataclass(frozen=True, slots=True)
class Hints:
    """Explicit labels from the caller (header `x-slorouter-task` / `metadata.task`, ...).

    `risk_may_lower`: whether the risk hint may go below the model's opinion (the caller's API
    key says; `risk_hints: raise_only` makes it False)."""

    task: Task | None = None
    risk: Risk | None = None
    risk_may_lower: bool = True


@dataclass(frozen=True, slots=True)
class Labels:
    """The classification of one request."""

    task: Task
    risk: Risk
    task_probs: Mapping[Task, float] = field(default_factory=dict)
    risk_probs: Mapping[Risk, float] = field(default_factory=dict)
    signals: frozenset[Signal] = frozenset()
    task_source: Literal["model", "hint", "default"] = "model"
    # For an `action`: whether it is taken to act on the world (side-effecting). False when only
    # the model said `action`, on little evidence (`classifier.acts_on_evidence`): it is routed
    # as an action, but retried and hedged as a read. Not read for other tasks.
    acts: bool = True


class Classifier(Protocol):
    """Labels a request by task and risk. Must be pure and fast (well under 1 ms)."""

    @property
    def version(self) -> str:
        """Content hash of the model artifact; part of the policy version."""
        ...

    def classify(self, request: RequestView, hints: Hints) -> Labels: ...
