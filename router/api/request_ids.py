"""Request ids: the client's `x-request-id`, or one made here."""

from __future__ import annotations

import os

from router.errors import RequestError

HEADER = "x-request-id"
# The longest id a client may choose: what `POST /v1/feedback` takes as its `request_id`. The
# id is echoed and kept with each request's experiment exposure (200,000 a tenant, in memory or
# Redis): unbounded, one tenant's megabyte ids would fill the process every tenant shares.
MAX_REQUEST_ID_LENGTH = 128


def new_request_id() -> str:
    """A random 128-bit id (32 hex digits), each drawn on its own: ids made from a counter
    would let a tenant read, from two of its own ids, how many requests everyone else sent in
    between. One `getrandom` call, about 0.5 µs."""
    return os.urandom(16).hex()


def usable(given: str) -> bool:
    """Whether a client's `x-request-id` is one to adopt: 1-128 printable ASCII characters."""
    return 0 < len(given) <= MAX_REQUEST_ID_LENGTH and given.isascii() and given.isprintable()


def check_request_id(given: str | None) -> None:
    """A 400 for a client's `x-request-id` that is not `usable` (absent or empty: one is made)."""
    if given and not usable(given):
        raise RequestError(
            f"{HEADER} must be 1-{MAX_REQUEST_ID_LENGTH} printable ASCII characters",
            param=HEADER, code="invalid_request_id")
