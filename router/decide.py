"""Deciding where a request goes: the requested name → a logical model → ordered deployments.

Pure: reads the runtime config and the request's labels, does no I/O. A routing alias (`auto`)
resolves through the per-task default table; a configured model name is pinned. The policy
issue replaces the alias rule with floors, SLO scoring and experiments behind the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.classify.types import Labels
from router.errors import NotFoundError
from router.runtime_config import RuntimeConfig


@dataclass(frozen=True, slots=True)
class Decision:
    requested: str
    model: str
    deployments: tuple[str, ...]  # in the order they are tried
    pinned: bool
    policy_version: str


def decide(requested: str, labels: Labels, config: RuntimeConfig) -> Decision:
    if requested in config.aliases:
        model = config.model_by_task.get(labels.task, config.default_model)
        pinned = False
    elif requested in config.models:
        model = requested
        pinned = True
    else:
        raise NotFoundError(f"The model '{requested}' does not exist; GET /v1/models lists "
                            "the names this router serves", param="model",
                            code="model_not_found")
    return Decision(requested=requested, model=model, deployments=config.models[model],
                    pinned=pinned, policy_version=config.version)
