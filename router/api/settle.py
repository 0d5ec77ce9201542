"""What follows an upstream answer, streamed or not: the idempotency record and the cache entry."""

from __future__ import annotations

import time

from router.api import idempotent
from router.caching import CachePlan, ResultCaching
from router.outcomes import Outcome


class Settle:
    """After an upstream answer: keep it for idempotent duplicates and in the result cache; after
    a failure: release the idempotency claim."""

    def __init__(self, claimed: idempotent.Claimed | None, caching: ResultCaching,
                 plan: CachePlan, headers: dict[str, str]) -> None:
        self._claimed = claimed
        self._caching = caching
        self._plan = plan
        self._headers = headers

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

    async def failed(self, error: BaseException | None) -> None:
        if self._claimed is not None:
            await self._claimed.failed(error)
