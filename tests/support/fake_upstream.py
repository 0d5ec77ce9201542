"""Helpers for the small hand-written upstreams some integration tests run (`http.server`)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.services import Running, start_router


def send_body(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
              content_type: str = "application/json") -> None:
    """Answer the handler's request with `status` and `body` (its length declared)."""
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    """Quiet about a client that hangs up (the router cutting a connection is often what a
    test is about); any other error in a handler is printed as usual."""

    daemon_threads = True

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket],
                     client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve_in_thread(
        handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[http.server.HTTPServer, str]:
    """`handler` served on a free loopback port from a daemon thread: the server (call its
    `shutdown()` to stop) and its base URL, `http://127.0.0.1:<port>`."""
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def stub_deployments(base_url: str, models: Sequence[str]) -> str:
    """The `deployments:` items of a router config on the upstream at `base_url`: for each
    model and adapter, `pt-{model}` (pass-through) or `ll-{model}` (litellm) asking for
    `openai/{model}` with the key `env:STUB_KEY`, a 5 s timeout and small prices."""
    return "".join(f"""
  - name: {prefix}-{model}
    model: openai/{model}
    adapter: {adapter}
    api_base: {base_url}/v1
    api_key: env:STUB_KEY
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
    timeout_s: 5""" for prefix, adapter in (("pt", "openai_passthrough"), ("ll", "litellm"))
        for model in models)


def stub_router_config(base_url: str) -> str:
    """A router config with one deployment per adapter on the upstream at `base_url`: models
    `pt-stub` (pass-through) and `ll-stub` (litellm), nothing retried, breakers that never open,
    the result cache on (it stores the answers of temperature-0 requests)."""
    deployments = stub_deployments(base_url, ["stub"])
    return f"""version: 1
deployments:{deployments}
models:
  - name: pt-stub
    deployments: [pt-stub]
  - name: ll-stub
    deployments: [ll-stub]
routes:
  default_model: pt-stub
server:
  request_timeout_s: 10
  cache:
    default:
      enabled: true
  reliability:
    max_retries_per_deployment: 0
    breaker:
      consecutive_failures: 1000000
      min_volume: 1000000
"""


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing to stderr (the tests' output stays readable)."""

    def log_message(self, format: str, *args: object) -> None:
        return


class ThreadedUpstream:
    """A hand-written upstream served from a thread (`serve_in_thread`): `server`, `base_url`,
    and `stop()`."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.server, self.base_url = serve_in_thread(handler)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def stub_gateway(directory: Path,
                 handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[Running]:
    """`handler` served as the upstream and a router on it (`stub_router_config`, models
    `pt-stub` and `ll-stub`, key `stub-key`) running in `directory`; both stopped on exit."""
    server, base_url = serve_in_thread(handler)
    running = start_router(directory, stub_router_config(base_url), env={"STUB_KEY": "stub-key"})
    try:
        yield running
    finally:
        running.stop()
        server.shutdown()
        server.server_close()
