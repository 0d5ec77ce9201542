"""The simulator's HTTP application (aiohttp.web) and the way to run it, in or out of process.

Routes: `POST /v1/chat/completions` (OpenAI), `POST /v1/messages` (Anthropic), `GET /v1/models`,
`GET /healthz`, and the control API (`control.py`). Each route is also served without the `/v1`
prefix, so either form of `api_base` works. Any API key is accepted and none is recorded.

aiohttp was measured against a bare ASGI app on uvicorn+httptools+uvloop on this 2-core box
(keep-alive POSTs of a small JSON body): both cost under 0.1 ms of server CPU per request;
aiohttp was kept because it cancels a handler when its client disconnects, which is how the
simulator counts cancellations without a second reader task per request.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from router.providers.simulator import control, engine
from router.providers.simulator.anthropic_wire import AnthropicWire
from router.providers.simulator.openai_wire import OpenAIWire
from router.providers.simulator.profile import ProfileFile
from router.providers.simulator.state import SimulatorState
from router.providers.simulator.wire import ErrorKind, Wire, WireError

MAX_BODY_BYTES = 64 * 1024 * 1024
OPENAI = OpenAIWire()
ANTHROPIC = AnthropicWire()


def _handler(wire: Wire) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[control.STATE_KEY]
        refused = wire.refuse_headers(request.headers)
        if refused is not None:
            return engine.error_response(wire, refused)
        try:
            sim = wire.parse(await request.read())
        except WireError as exc:
            return engine.error_response(wire, ErrorKind(400, "invalid_request", str(exc)))
        return await engine.serve(request, state, sim, wire)

    return handle


async def list_models(request: web.Request) -> web.Response:
    """OpenAI's model list: every configured model name."""
    state = request.app[control.STATE_KEY]
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "slorouter-sim"}
        for name in state.models
    ]
    return web.Response(body=orjson.dumps({"object": "list", "data": data}),
                        content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


def build_app(state: SimulatorState) -> web.Application:
    """The aiohttp application serving one simulator state."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[control.STATE_KEY] = state
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/chat/completions", _handler(OPENAI))
        app.router.add_post(f"{prefix}/messages", _handler(ANTHROPIC))
        app.router.add_get(f"{prefix}/models", list_models)
    app.router.add_get("/healthz", healthz)
    control.add_routes(app)
    return app


def new_state(profiles: ProfileFile, seed: int | None = None) -> SimulatorState:
    """A fresh state on the monotonic clock; `seed` makes latency and fault draws repeatable."""
    return SimulatorState(profiles, time.monotonic, random.Random(seed))


@dataclass(frozen=True)
class RunningSimulator:
    """A simulator serving in this process: its base URL (no `/v1`) and its live state."""

    base_url: str
    state: SimulatorState

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"


@asynccontextmanager
async def running_simulator(
    profiles: ProfileFile, host: str = "127.0.0.1", port: int = 0, seed: int | None = None
) -> AsyncIterator[RunningSimulator]:
    """Serve a simulator on the running event loop until the block exits (port 0: any free)."""
    state = new_state(profiles, seed)
    runner = web.AppRunner(build_app(state), access_log=None, handler_cancellation=True,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    try:
        yield RunningSimulator(f"http://{bound_host}:{bound_port}", state)
    finally:
        await runner.cleanup()


async def serve_until_stopped(profiles: ProfileFile, host: str, port: int,
                              seed: int | None, stop: asyncio.Event) -> None:
    """Serve until `stop` is set (the CLI sets it on SIGINT/SIGTERM)."""
    async with running_simulator(profiles, host, port, seed) as sim:
        # Whatever start-up loaded lives as long as the process: keep it out of the collector's
        # scans, so that a full collection does not stall every answer in flight.
        gc.collect()
        gc.freeze()
        names = ", ".join(sim.state.models)
        default = profiles.default_model
        print(f"slorouter sim listening on {sim.base_url} (models: {names}; unknown models: "
              f"{'profile of ' + default if default else '404'})", flush=True)
        await stop.wait()
