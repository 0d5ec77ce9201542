"""An ASGI app served by uvicorn with a given HTTP protocol class, in a thread of the test process:
for tests of the protocol itself (`router/service_protocol.py`), with raw sockets against it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from tests.support.procs import free_port


@contextlib.contextmanager
def served(app: Any, protocol: type, **options: Any) -> Iterator[tuple[uvicorn.Server, int]]:
    """uvicorn serving `app` with `protocol` (and further `uvicorn.Config` options) on a free
    loopback port, started and stopped around the block; yields the server and the port."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop", http=protocol,
                            lifespan="off", access_log=False, log_config=None, **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "uvicorn did not start within 10 s"
    try:
        yield server, port
    finally:
        server.should_exit = True
        thread.join(10)
