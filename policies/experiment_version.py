"""The version of what an experiment's arms are served by, beyond the spec itself.

`ExperimentSpec.treatment_version` hashes the spec's arms as written (`model:small`,
`policy:chat`). What those names resolve to lives elsewhere in the configuration: the task
policies control's route follows, the provider models behind each named model. A rolling deploy
that changed them under an unchanged spec kept one version, so the shared store mixed the two
routes' outcomes in one arm and kept a halt decided on the old deployment (the rollout audit).
`served_version` hashes both; shared outcomes and halts are kept under it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from policies.experiments.schema import ExperimentSpec
from policies.schema import RouterConfig


def served_version(spec: ExperimentSpec, config: RouterConfig,
                   resolved: Mapping[str, str] | None = None,
                   learned: Mapping[str, str] | None = None) -> str:
    """12 hex digits over the spec's treatment version, the task policies of its tasks (or the
    routes, without policies), the provider model strings of every model an arm or those
    policies name and, given, those models' `resolved` facts (model name → a digest of its
    deployments' prices and capabilities as resolved, litellm's table included) and the
    `learned` routers (path → version) those policies name: a router retrained in place, or a
    litellm upgrade's prices, change what control's route serves (the policies audit of
    2026-12-07). Eval results are left out: re-running an eval does not restart experiments."""
    policies = config.policies
    routing: dict[str, object] = (
        {task: policies.for_task(task).model_dump(mode="json") for task in spec.tasks}
        if policies is not None else {"routes": config.routes.model_dump(mode="json")})
    named = {arm.route.removeprefix("model:") for arm in spec.arms
             if arm.route.startswith("model:")}
    if policies is not None:
        for task in spec.tasks:
            policy = policies.for_task(task)
            named |= set(policy.candidates) | set(policy.fallbacks)
    deployments = {d.name: d.model for d in config.deployments}
    providers = {m.name: sorted(deployments[d] for d in m.deployments if d in deployments)
                 for m in config.models if m.name in named}
    routers = ({path for task in spec.tasks
                if (path := policies.for_task(task).learned_router) is not None}
               if policies is not None else set())
    text = json.dumps({"spec": spec.treatment_version, "routing": routing,
                       "providers": providers,
                       "resolved": {m: (resolved or {}).get(m) for m in sorted(named)},
                       "learned": {r: (learned or {}).get(r) for r in sorted(routers)}},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
