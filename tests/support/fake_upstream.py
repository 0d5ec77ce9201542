"""Helpers for the small hand-written upstreams some integration tests run (`http.server`)."""

from __future__ import annotations

import http.server
import threading


def send_body(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
              content_type: str = "application/json") -> None:
    """Answer the handler's request with `status` and `body` (its length declared)."""
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve_in_thread(
        handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[http.server.HTTPServer, str]:
    """`handler` served on a free loopback port from a daemon thread: the server (call its
    `shutdown()` to stop) and its base URL, `http://127.0.0.1:<port>`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
