"""The embedded default: which built-in configuration `slorouter serve` uses with no --config.

With OPENAI_API_KEY and/or ANTHROPIC_API_KEY set, the provider default keeps the deployments
whose key is present. With neither, the simulator default is used and `serve` starts the
provider simulator beside the service.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from policies.loader import load_config_file
from policies.schema import ModelSpec, RouterConfig, RoutesSpec

DEFAULTS = Path(__file__).resolve().parent.parent / "policies" / "defaults"
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def has_provider_keys(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name) for name in PROVIDER_KEYS)


def default_file(environ: Mapping[str, str]) -> Path:
    """The file of the embedded default for this environment."""
    return DEFAULTS / ("providers.yaml" if has_provider_keys(environ) else "simulator.yaml")


def default_config(environ: Mapping[str, str], *, unset_stand_in: bool = False) -> RouterConfig:
    """The embedded default for this environment: the provider default when a provider key is
    set, else the simulator default (`unset_stand_in`: its address may be unset, for tools that
    call nothing)."""
    if has_provider_keys(environ):
        return provider_config(environ)
    return simulator_config(environ, unset_stand_in=unset_stand_in)


def simulator_config(environ: Mapping[str, str], *, unset_stand_in: bool = False
                     ) -> RouterConfig:
    return load_config_file(DEFAULTS / "simulator.yaml", environ, unset_stand_in=unset_stand_in)


def provider_config(environ: Mapping[str, str]) -> RouterConfig:
    """The provider default, narrowed to the deployments whose API key is set."""
    full = load_config_file(DEFAULTS / "providers.yaml", environ)
    usable = tuple(d for d in full.deployments
                   if d.api_key is None or environ.get(d.api_key.removeprefix("env:")))
    names = {d.name for d in usable}
    models = tuple(ModelSpec(name=m.name, deployments=kept) for m in full.models
                   if (kept := tuple(n for n in m.deployments if n in names)))
    model_names = {m.name for m in models}
    default = full.routes.default_model
    if default not in model_names:
        default = models[0].name
    routes = RoutesSpec(aliases=full.routes.aliases, default_model=default,
                        by_task={t: m for t, m in full.routes.by_task.items()
                                 if m in model_names})
    return full.model_copy(update={"deployments": usable, "models": models, "routes": routes})
