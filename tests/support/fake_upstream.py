"""Helpers for the small hand-written upstreams some integration tests run (`http.server`)."""

from __future__ import annotations

import http.server


def send_body(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
              content_type: str = "application/json") -> None:
    """Answer the handler's request with `status` and `body` (its length declared)."""
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
