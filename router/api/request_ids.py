"""Request ids: the client's `x-request-id`, or one made here."""

from __future__ import annotations

import os


def new_request_id() -> str:
    """A random 128-bit id (32 hex digits), each drawn on its own: ids made from a counter
    would let a tenant read, from two of its own ids, how many requests everyone else sent in
    between. One `getrandom` call, about 0.5 µs."""
    return os.urandom(16).hex()
