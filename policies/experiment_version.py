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

from policies.experiments.schema import ExperimentSpec
from policies.schema import RouterConfig


def served_version(spec: ExperimentSpec, config: RouterConfig) -> str:
    """12 hex digits over the spec's treatment version, the task policies of its tasks (or the
    routes, without policies) and the provider model strings of every model an arm or those
    policies name. Eval results are left out: re-running an eval does not restart experiments."""
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
    text = json.dumps({"spec": spec.treatment_version, "routing": routing,
                       "providers": providers}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
