"""Idempotency values and the store protocol; key scoping and body fingerprints.

A request with an `Idempotency-Key` header claims the key (scoped per tenant) with the
fingerprint of its body. The store answers with one of:
- `Lease`: you are first; execute, then `complete(lease, response)` or `release(lease)`;
- `Replay`: a request with this key already completed; send back its stored response;
- `ConflictError` (422): the key was used with a different body (code `idempotency_key_reuse`),
  or the first request is still running after `wait_s` (code `idempotency_key_in_flight`).
A duplicate that arrives while the first is in flight waits (up to `wait_s`) for it to finish.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final, Protocol

import orjson

from router.errors import ConflictError, RequestError, StillRunningError, UnknownCommitError

IDEMPOTENCY_HEADER: Final = "idempotency-key"
MAX_KEY_LENGTH: Final = 255


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """What a duplicate gets back: status, a subset of headers, and the exact body bytes."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to execute the request once. `token` proves ownership to the store.
    `contended`: won after waiting for another holder of the key (it failed, or stopped)."""

    scope: str
    token: str
    fingerprint: str
    contended: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Replay:
    """The stored result of the request that completed first."""

    response: StoredResponse


Claim = Lease | Replay


def error_response(error: UnknownCommitError) -> StoredResponse:
    """The OpenAI error body of `error`, as stored for duplicates."""
    body = orjson.dumps(error.to_openai())
    return StoredResponse(error.status_code, (("content-type", "application/json"),), body)


class IdempotencyStore(Protocol):
    """Where claims, in-flight markers and results live (in memory, or Redis across replicas)."""

    async def claim(
        self, tenant: str, key: str, fingerprint: str, *, wait_s: float, lease_s: float,
        acting: bool = False,
    ) -> Claim:
        """Lease or Replay; waits up to `wait_s` for an in-flight duplicate; may raise 422.
        `acting`: the request is a side effect, which must not run again even when the process
        holding its key dies unsettled (the Redis store then answers its duplicates with a
        stored 504 `unknown_commit`; in memory, the key dies with the process)."""
        ...

    async def complete(self, lease: Lease, response: StoredResponse) -> bool:
        """Store the result for later duplicates; False if the lease was lost (expired, or
        taken). The Redis store also stores into a key found gone (Redis lost it)."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Drop the in-flight marker so a retry may run; False if the lease was lost."""
        ...

    async def renew(self, lease: Lease, lease_s: float) -> bool:
        """Extend the in-flight marker to `lease_s` from now, only while it is still ours;
        False if the lease was lost (expired, taken, completed or released): never taken back
        from another holder. The Redis store takes back a key found gone (Redis lost it, or
        it expired untaken), as its `complete` stores into one; so a lease is renewed only
        until its request settles. May raise `OverloadedError` (503) when the store cannot be
        reached."""
        ...


def validate_key(key: str) -> str:
    """The key if usable: 1-255 printable ASCII characters; else a 400."""
    if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise RequestError(
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    return key


def scope_of(tenant: str, key: str) -> str:
    """A fixed-length name for (tenant, key): one tenant never sees another's keys."""
    return hashlib.sha256(f"{tenant}\x00{key}".encode()).hexdigest()


def body_fingerprint(body: bytes) -> str:
    """The SHA-256 of the body, canonicalised (sorted keys) when it is JSON."""
    try:
        return json_fingerprint(orjson.loads(body))
    except orjson.JSONDecodeError:
        return hashlib.sha256(body).hexdigest()


def json_fingerprint(value: object) -> str:
    """`body_fingerprint` of an already parsed JSON value (no second parse)."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def record_unreadable() -> ConflictError:
    """The key's record is of a shape this version cannot read (written by another version of
    slorouter, or edited by hand): whether the request ran cannot be told, so it is not run."""
    return ConflictError(
        "Idempotency-Key has a record this version of the router cannot read (another version "
        "wrote it): whether the request ran cannot be told, so it is not run again; use a new "
        "key once you have checked", param="Idempotency-Key",
        code="idempotency_record_unreadable")


def key_reused() -> ConflictError:
    return ConflictError(
        "Idempotency-Key was already used with a different request (its body, or a header "
        "that changes what is asked: x-slorouter-task, x-slorouter-risk, "
        "x-slorouter-data-version, accept-language), or by an API key with other permission "
        "scopes",
        param="Idempotency-Key",
        code="idempotency_key_reuse",
    )


# How soon a duplicate may ask again: the first request may end any moment (its lease's end
# is only a bound, renewed while it runs, which once was the whole request timeout and told
# clients to wait two minutes).
IN_FLIGHT_RETRY_AFTER_S = 1.0


def won_too_late(left_s: float) -> StillRunningError:
    """For a duplicate that won the key after waiting, with less of its own time left than it
    waited (the holder ran at least that long): an upstream call now would most likely be cut
    by its deadline, and for a side effect be settled as an unknown commit. The key is given
    back; the same key retried at once runs with a whole deadline."""
    return StillRunningError(
        f"the request holding this Idempotency-Key ended with only {left_s:.1f}s of this "
        "request's time left, too little to run it; retry with the same key",
        param="Idempotency-Key",
        code="idempotency_key_won_late",
        retry_after=IN_FLIGHT_RETRY_AFTER_S,
    )


def still_in_flight(lease_left_s: float) -> StillRunningError:
    return StillRunningError(
        "a request with this Idempotency-Key is still in progress",
        param="Idempotency-Key",
        code="idempotency_key_in_flight",
        retry_after=min(lease_left_s, IN_FLIGHT_RETRY_AFTER_S),
    )
