"""The simulator's control API: change behaviour at run time and read counters.

    GET  /control/models           current profile of every model (and the default model)
    POST /control/models           add or replace a model: {"name", "profile": {...}, "base"?}
    POST /control/models/{model}   change some profile fields: {"ttft_p50_ms": 2000, ...}
    POST /control/reset            {"profiles"?, "stats"?, "prefix_cache"?} (all true by default)
    GET  /control/stats            per-model counters (see `stats.ModelStats.snapshot`)

Bodies are validated by pydantic with `extra="forbid"`: unknown or invalid fields get a 422 with
pydantic's error list; an unknown model gets a 404.
"""

from __future__ import annotations

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.providers.simulator.profile import ModelProfile
from router.providers.simulator.state import SimulatorState, UnknownModelError

STATE_KEY: web.AppKey[SimulatorState] = web.AppKey("simulator_state", SimulatorState)


class AddModelRequest(BaseModel):
    """Add (or replace) a model; `base` copies an existing model's profile before `profile`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    base: str | None = None
    profile: dict[str, object] = Field(default_factory=dict)


class ResetRequest(BaseModel):
    """What `POST /control/reset` puts back to its start state."""

    model_config = ConfigDict(extra="forbid")

    profiles: bool = True
    stats: bool = True
    prefix_cache: bool = True


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _problem(status: int, message: str, details: object = None) -> web.Response:
    body: dict[str, object] = {"message": message, "type": "invalid_request_error"}
    if details is not None:
        body["details"] = details
    return _json({"error": body}, status)


def _invalid(exc: ValidationError) -> web.Response:
    return _problem(422, "invalid control request", orjson.loads(exc.json(include_url=False)))


async def _body(request: web.Request) -> object:
    raw = await request.read()
    return orjson.loads(raw) if raw.strip() else {}


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    profiles = {name: rt.profile.model_dump(mode="json") for name, rt in state.models.items()}
    return _json({"default_model": state.default_model, "models": profiles})


async def patch_model(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    name = request.match_info["model"]
    try:
        changes = await _body(request)
        if not isinstance(changes, dict):
            return _problem(422, "the body must be a JSON object of profile fields")
        profile = state.patch(name, changes)
    except orjson.JSONDecodeError:
        return _problem(400, "malformed JSON")
    except UnknownModelError:
        return _problem(404, f"unknown model {name!r}")
    except ValidationError as exc:
        return _invalid(exc)
    return _json({"name": name, "profile": profile.model_dump(mode="json")})


async def add_model(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        body = AddModelRequest.model_validate(await _body(request))
        base = ModelProfile() if body.base is None else state.models[body.base].profile
        profile = base.patched(body.profile)
    except orjson.JSONDecodeError:
        return _problem(400, "malformed JSON")
    except KeyError as exc:
        return _problem(404, f"unknown base model {exc.args[0]!r}")
    except ValidationError as exc:
        return _invalid(exc)
    state.upsert(body.name, profile)
    return _json({"name": body.name, "profile": profile.model_dump(mode="json")}, 201)


async def reset(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        body = ResetRequest.model_validate(await _body(request))
    except orjson.JSONDecodeError:
        return _problem(400, "malformed JSON")
    except ValidationError as exc:
        return _invalid(exc)
    state.reset(profiles=body.profiles, stats=body.stats, prefix_cache=body.prefix_cache)
    return _json({"reset": body.model_dump()})


async def stats(request: web.Request) -> web.Response:
    return _json(request.app[STATE_KEY].snapshot())


def add_routes(app: web.Application) -> None:
    """Register the control routes on an application that holds a `STATE_KEY`."""
    app.router.add_get("/control/models", list_models)
    app.router.add_post("/control/models", add_model)
    app.router.add_post("/control/models/{model}", patch_model)
    app.router.add_post("/control/reset", reset)
    app.router.add_get("/control/stats", stats)
