"""The configuration file's model: deployments, logical models, routes, API keys, server settings.

Validated with pydantic (`extra="forbid"` everywhere), immutable once loaded. Cross-references
(route → model → deployment) are checked by `policies.loader`, which lists every problem at once.
Nothing here resolves secrets or talks to providers: `api_key: env:NAME` stays a reference.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.labels import Task

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
Name = Annotated[str, Field(pattern=_NAME)]
SecretRef = Annotated[str, Field(pattern=r"^env:[A-Za-z_][A-Za-z0-9_]*$")]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeploymentSpec(Frozen):
    """One concrete endpoint of a model: provider + model + base URL + key."""

    name: Name
    model: str = Field(min_length=1, description="litellm model string, e.g. openai/gpt-4o-mini")
    adapter: Literal["litellm", "openai_passthrough"] = "litellm"
    api_base: str | None = None
    api_key: SecretRef | None = None
    input_price_per_mtok: float | None = Field(default=None, ge=0)
    output_price_per_mtok: float | None = Field(default=None, ge=0)
    context_window: int | None = Field(default=None, gt=0)
    supports_tools: bool = True
    supports_json: bool = True
    zero_data_retention: bool = False
    connect_timeout_s: float = Field(default=5.0, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)

    @field_validator("api_base")
    @classmethod
    def _http_base(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value):
            raise ValueError("api_base must start with http:// or https://")
        return value.rstrip("/") if value is not None else None


class ModelSpec(Frozen):
    """A logical model name that clients and policies use, served by one or more deployments."""

    name: Name
    deployments: tuple[Name, ...] = Field(min_length=1)


class ApiKeySpec(Frozen):
    """A client key (by env reference or by its SHA-256), mapped to a tenant and scopes."""

    key: SecretRef | None = None
    key_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    tenant: Name
    scopes: tuple[str, ...] = ()

    def model_post_init(self, _context: object) -> None:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("set exactly one of key (env:NAME) or key_sha256")


class RoutesSpec(Frozen):
    """How the routing alias `auto` resolves: a per-task default model and a catch-all."""

    aliases: tuple[Name, ...] = ("auto",)
    default_model: Name
    by_task: dict[Task, Name] = Field(default_factory=dict)


class ServerSpec(Frozen):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    request_timeout_s: float = Field(default=120.0, gt=0)
    cache_dir: str | None = None


class RouterConfig(Frozen):
    """The whole configuration file."""

    version: Literal[1] = 1
    deployments: tuple[DeploymentSpec, ...] = Field(min_length=1)
    models: tuple[ModelSpec, ...] = Field(min_length=1)
    routes: RoutesSpec
    api_keys: tuple[ApiKeySpec, ...] = ()
    server: ServerSpec = ServerSpec()
