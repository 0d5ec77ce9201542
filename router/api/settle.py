"""What follows an upstream answer, streamed or not: the idempotency record and the cache entry."""

from __future__ import annotations

import asyncio
import time

from router.api import idempotent
from router.api.errors import ClientGone
from router.caching import CachePlan, ResultCaching
from router.errors import SlorouterError, UnknownCommitError
from router.outcomes import Outcome

# Attempts that had (or may have had) the request when the request stopped: one in flight,
# one abandoned when the request was interrupted, one whose answer had begun.
_REACHED = frozenset({"pending", "cancelled", "won"})


class Settle:
    """After an upstream answer: keep it for idempotent duplicates and in the result cache; after
    a failure: release the idempotency claim, or, for a side effect the upstream may have acted
    on, keep its 504 `unknown_commit` so that a duplicate never runs it a second time."""

    def __init__(self, claimed: idempotent.Claimed | None, caching: ResultCaching,
                 plan: CachePlan, headers: dict[str, str], *, side_effecting: bool) -> None:
        self._claimed = claimed
        self._caching = caching
        self._plan = plan
        self._headers = headers
        self._side_effecting = side_effecting

    @property
    def wants_body(self) -> bool:
        return self._claimed is not None or self._plan.decision.write

    async def succeeded(self, body: bytes | None, outcome: Outcome) -> None:
        """`body` is None when nothing wants it (no idempotency claim, no cache write)."""
        self._caching.note_prefix(outcome.cached_tokens)
        if body is None:
            return
        if self._claimed is not None:
            await self._claimed.succeeded(body, self._headers)
        generation = (outcome.ended_at if outcome.ended_at is not None
                      else time.perf_counter()) - outcome.arrived_at
        await self._caching.store(self._plan, body, generation, outcome.deployment or "")

    async def failed(self, error: BaseException | None, outcome: Outcome, *,
                     answer_begun: bool = False) -> None:
        """`error`: what ended the request (None: its client left a stream). `answer_begun`:
        the upstream had answered 200, so it had the request. Otherwise the runner has judged
        every attempt it finished (a side effect that may have run is its `UnknownCommitError`),
        and only one interrupted in flight (the client left, the server stopped) is unjudged:
        a side effect it may have run is marked on `outcome` (`may_have_taken_effect`), so that
        a request the server's shutdown ends answers `unknown_commit`, as its key keeps."""
        if self._side_effecting and (
                answer_begun or (_interrupted(error)
                                 and any(a.outcome in _REACHED for a in outcome.attempts))):
            outcome.may_have_taken_effect = True
            if not isinstance(error, UnknownCommitError):  # a stream's own last event may be
                error = unfinished(error, keyed=self._claimed is not None)
        if self._claimed is not None:
            await self._claimed.failed(error)

    def stream_ended_by(self, error: SlorouterError) -> SlorouterError:
        """The last event of a begun stream the router ends with `error` (its shutdown): for a
        side effect, the upstream had it and may act on it, so `unknown_commit`, as a whole
        answer's, never the `server_shutting_down` the SDKs retry."""
        if not self._side_effecting:
            return error
        return unfinished(error, keyed=self._claimed is not None)


def _interrupted(error: BaseException | None) -> bool:
    return error is None or isinstance(error, ClientGone | asyncio.CancelledError)


def unfinished(error: BaseException | None, keyed: bool = True) -> UnknownCommitError:
    """The record a side effect keeps when it reached the upstream and did not finish, and the
    answer its client gets: `keyed`, sent with an Idempotency-Key (the message says the key
    keeps it; without one, it says not to send it again blindly)."""
    if isinstance(error, SlorouterError):
        why = error.code
    elif isinstance(error, asyncio.CancelledError):
        why = "the router stopped it"
    else:
        why = "its client left"
    then = ("so this Idempotency-Key does not run it again: use a new key to run it knowingly"
            if keyed else "so check whether it did before sending it again")
    return UnknownCommitError(
        f"the request reached the upstream and did not finish ({why}); it may have taken "
        f"effect, {then}", code="unknown_commit")
