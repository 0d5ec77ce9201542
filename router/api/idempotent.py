"""Idempotency keys at the HTTP layer: claim before executing, store or release after.

A request with `Idempotency-Key` (scoped per tenant) claims the key: the first one runs, a
duplicate in flight waits for it, a duplicate after completion gets the stored answer (replayed
as SSE when it streams, whether or not the first one did), and the same key with another body
(`stream` and `stream_options` aside) or other routing hints, data version or locale headers is
a 422. An answer from the result cache completes the claim as an upstream one does. An unknown
commit is stored as its 504 so nothing runs twice (`router.api.settle` makes one of any failure
of a side effect the upstream may have had); any other failure releases the key for a retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from cache.keys import normalize_locale
from router.api.body import header_values
from router.api.replay import body_response
from router.api.sse import OnFinish, Receive, run_unless_disconnected
from router.caching import DATA_VERSION_HEADER
from router.errors import ProviderTimeoutError, RequestError, SlorouterError, UnknownCommitError
from router.execution import late_timers
from router.execution.failures import deadline_exceeded
from router.idempotency import (
    LEASE_S,
    Claim,
    IdempotencyStore,
    Lease,
    Replay,
    StoredResponse,
    error_response,
    json_fingerprint,
    keep_renewed,
    validate_key,
    won_too_late,
)
from router.outcomes import Outcome
from router.providers.error_text import error_fields
from router.runtime_config import Principal

HEADER = "idempotency-key"
# How an answer is delivered is not part of what was asked: a duplicate may stream or not, and
# gets the stored answer either way.
DELIVERY_FIELDS = frozenset({"stream", "stream_options"})
# Headers that change what is asked (the routing hints, the version of the documents behind the
# answer, the locale that scopes who may read it) are part of the request as the body is; those
# that change only how it is served (priority, timeout, session) are not.
ASKED_HEADERS = ("x-slorouter-task", "x-slorouter-risk", DATA_VERSION_HEADER, "accept-language")
# A duplicate stops waiting for the request in flight with its key this long before its own
# deadline, leaving the time to read the lease's end and answer 409 `idempotency_key_in_flight`
# (which the client retries for the replay) before the claim's bound answers 504.
CLAIM_ANSWER_S = 0.05


@dataclass(frozen=True, slots=True)
class Claimed:
    """A won lease, renewed (`renewing`) until the request settles with one of the methods."""

    store: IdempotencyStore
    lease: Lease
    renewing: asyncio.Task[None]

    async def succeeded(self, body: bytes, headers: Mapping[str, str]) -> None:
        self.renewing.cancel()
        kept = tuple((k, v) for k, v in headers.items() if k.startswith("x-slorouter-"))
        await self.store.complete(self.lease, StoredResponse(
            200, (("content-type", "application/json"), *kept), body))

    async def failed(self, error: BaseException | None) -> None:
        self.renewing.cancel()
        if isinstance(error, UnknownCommitError):
            await self.store.complete(self.lease, error_response(error))
        else:
            await self.store.release(self.lease)


def check_sent_once(received: Mapping[str, str], raw_headers: Iterable[tuple[bytes, bytes]]
                    ) -> None:
    """A 400 for an `Idempotency-Key` header sent more than once: which key guards the side
    effect would be a guess (the first was taken; a proxy that joins repeated headers would
    make a third key of them)."""
    if HEADER in received and len(header_values(raw_headers, b"idempotency-key")) > 1:
        raise RequestError("Idempotency-Key was sent more than once; send one key",
                           param="Idempotency-Key", code="invalid_idempotency_key")


async def claim(store: IdempotencyStore, headers: Mapping[str, str], principal: Principal,
                raw: Mapping[str, Any], required: bool, time_left_s: float,
                receive: Receive, lease_s: float = LEASE_S,
                acting: bool = False, renew_for_s: float | None = None
                ) -> Claimed | Replay | None:
    """Claim the request's key; None when it has none (a 400 if the policy requires one).
    `acting`: a side effect (`IdempotencyStore.claim`).

    The whole claim is bounded by `time_left_s` (the request's): a claim still waiting for a
    connection or a reply from the store when it runs out is given up with a 504
    `deadline_exceeded` that says nothing ran (`claim_timed_out`); a lease its command may
    still set is given back by the store. A duplicate waits here (up to `CLAIM_ANSWER_S`
    before that end, so that its 409 has time to be found and sent) for the request in flight
    with its key: a client that leaves meanwhile ends the wait at once (`ClientGone`), freeing
    its admission slot, and a lease won just as it left is given back. A duplicate that wins
    the key after waiting, with less time left than it waited, gives it back with a 409
    `idempotency_key_won_late` rather than start an upstream call its deadline would cut. The
    lease is short (`lease_s`: `server.idempotency_lease_s`) and renewed until the request
    settles or its own time is up: `renew_for_s`, the holder's whole answer's time left, which
    for a stream outlasts `time_left_s`, its wait for the first token (renewals stopped there
    until 2026-12-07: a keyed stream that outlived its SDK's timeout by one lease lost its key
    mid-stream, and a duplicate ran the request, a side effect included, a second time)."""
    key = headers.get(HEADER)
    if key is None:
        if required:
            raise RequestError("this task's policy requires an Idempotency-Key header on "
                               "every request (require_idempotency_key)",
                               param="Idempotency-Key",
                               code="idempotency_key_required")
        return None
    asked: dict[str, Any] = {k: v for k, v in raw.items() if k not in DELIVERY_FIELDS}
    hinted = {name: headers[name] for name in ASKED_HEADERS if name in headers}
    if "accept-language" in hinted:  # as the result cache reads it: `en_US` is `en-us`
        hinted["accept-language"] = normalize_locale(hinted["accept-language"])
    # Without such headers the fingerprint is the body's alone (as before they counted). The
    # caller's permission scopes are part of what is asked, not of whose key it is: a retry
    # after its key gained or lost a scope finds the record and is refused (422
    # `idempotency_key_reuse`), neither replayed an answer other scopes may read nor run again.
    scopes = sorted(set(principal.scopes))
    asked_for = {"body": asked, "headers": hinted} if hinted else asked
    fingerprint = json_fingerprint({"asked": asked_for, "scopes": scopes} if scopes
                                   else asked_for)
    async def unused(won: Claim) -> None:
        if not isinstance(won, Replay):
            await store.release(won)

    loop = asyncio.get_running_loop()
    asked_at = loop.time()
    # Whose keys these are: the tenant's (the scopes are in the fingerprint). Until 2026-12-06
    # they were the tenant's and scopes', so adding a scope to an API key ran a retried side
    # effect again.
    owner, checked = principal.tenant, validate_key(key)

    async def bounded() -> Claim:
        try:
            async with late_timers.timeout(time_left_s):
                return await store.claim(owner, checked, fingerprint, lease_s=lease_s,
                                         wait_s=max(0.0, time_left_s - CLAIM_ANSWER_S),
                                         acting=acting)
        except TimeoutError:
            raise claim_timed_out() from None

    result = await run_unless_disconnected(receive, bounded(), unused)
    if isinstance(result, Replay):
        return result
    ends_at = asked_at + time_left_s
    now = loop.time()
    if result.contended and ends_at - now < now - asked_at:
        await store.release(result)
        raise won_too_late(max(0.0, ends_at - now))
    held_until = asked_at + max(time_left_s, renew_for_s or 0.0)
    return Claimed(store, result, keep_renewed(store, result, lease_s=lease_s, until=held_until))


def claim_timed_out() -> ProviderTimeoutError:
    """The request's deadline passed while its key was being claimed: nothing ran upstream,
    so the same request with the same key may be sent again (a lease its claim may have set
    after all is given back by the store, or expires with its lease)."""
    return deadline_exceeded("while its Idempotency-Key was being claimed (the idempotency "
                             "store answered too late); nothing was run, so the request may be "
                             "retried with the same key")




# `error.type` of a request answered with the stored failure of its Idempotency-Key's record
REPLAYED_FAILURE = "replayed_failure"


def note_replay(outcome: Outcome, stored: StoredResponse, deployments: Container[str]) -> None:
    """What a replay's outcome says: the status the client gets (a stored 504
    `unknown_commit` was recorded as a 200 and counted as available until 2026-12-07), the
    stored error's code, and the deployment that answered the first time (its span names it).
    No first content time: a replay's is the router's, which no TTFT target or histogram
    should count as an answer's."""
    outcome.idempotent_replay = True
    outcome.status = stored.status
    if stored.status >= 400:
        outcome.error_type = REPLAYED_FAILURE
        outcome.error_code = error_fields(stored.body.decode("utf-8", "replace"))[1]
    answered_by = dict(stored.headers).get("x-slorouter-model")
    if answered_by in deployments:
        outcome.replayed_from = answered_by


def replayed(stored: StoredResponse, stream: bool, include_usage: bool,
             headers: dict[str, str], on_finish: OnFinish, time_limit_s: float) -> Response:
    """The stored answer for a duplicate: as stored, or as an SSE stream when it streams
    (ended with `on_finish`; `time_limit_s`: the request's time left)."""
    headers.update({k: v for k, v in stored.headers if k != "content-type"})
    headers["x-slorouter-idempotent-replay"] = "true"
    if stored.status != 200:
        # A stored failure (an `unknown_commit`) is what every retry with this key gets: the
        # SDKs, which retry a 504 twice by themselves, are told not to (the record keeps only
        # `x-slorouter-*` headers, so the first answer's `x-should-retry` was not replayed).
        headers["x-should-retry"] = "false"
    return body_response(stored.body, stream=stream, include_usage=include_usage,
                         headers=headers, on_finish=on_finish, status=stored.status,
                         time_limit_s=time_limit_s)


def as_error(exc: BaseException) -> BaseException | None:
    return exc if isinstance(exc, SlorouterError) else None
