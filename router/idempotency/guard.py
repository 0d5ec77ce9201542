"""Run a request at most once per idempotency key: claim, execute, store or release.

`run_once` is the whole protocol for a response that is produced in one piece:
- a `Replay` is returned as is (`replayed=True`), without executing;
- after success the response is stored for later duplicates;
- after `UnknownCommitError` (the action may have happened upstream) its 504 error response is
  stored, so duplicates get the same 504 rather than a second execution; to try again the
  client must use a new key, knowingly;
- after any other failure, or cancellation (client gone: it never saw a result, so it cannot
  have acted on one), the in-flight marker is released and a retry with the same key proceeds.
The lease (`lease_s`) is renewed while `execute` runs (`keep_renewed`), so it may be short: a
holder that dies frees the key within `lease_s`. A streamed response can use the store's
`claim` / `renew` / `complete` / `release` directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from router.errors import UnknownCommitError
from router.idempotency.renewal import keep_renewed
from router.idempotency.types import IdempotencyStore, Replay, StoredResponse, error_response


@dataclass(frozen=True, slots=True)
class OnceResult:
    """The response, and whether it is a replay of an earlier execution."""

    response: StoredResponse
    replayed: bool


async def run_once(
    store: IdempotencyStore,
    tenant: str,
    key: str,
    fingerprint: str,
    execute: Callable[[], Awaitable[StoredResponse]],
    *,
    wait_s: float,
    lease_s: float,
) -> OnceResult:
    """Execute at most once for (tenant, key); duplicates wait for, then replay, the result.

    Raises `ConflictError` (422) for a different body under the same key, and re-raises the
    execution's own error (after releasing or recording it as described above).
    """
    claim = await store.claim(tenant, key, fingerprint, wait_s=wait_s, lease_s=lease_s)
    if isinstance(claim, Replay):
        return OnceResult(claim.response, replayed=True)
    renewing = keep_renewed(store, claim, lease_s=lease_s)
    try:
        response = await execute()
    except UnknownCommitError as error:
        renewing.cancel()
        await store.complete(claim, error_response(error))
        raise
    except BaseException:
        renewing.cancel()
        await store.release(claim)
        raise
    renewing.cancel()
    await store.complete(claim, response)
    return OnceResult(response, replayed=False)
