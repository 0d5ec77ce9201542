"""Keep a won lease alive while its request runs, so a crashed holder frees its key quickly.

An in-flight marker lives `LEASE_S` (a few seconds), not the request's whole deadline: its
holder renews it (compare-and-extend) every third of that while the request runs, streams
included, and stops when the request settles. A replica that dies (SIGKILL, OOM, lost host)
stops renewing, and its duplicates win the key within `LEASE_S` instead of waiting out the
whole request timeout and calling upstream with seconds left. One timer task per keyed request
that won its lease, only while it runs; nothing for requests without a key or for replays.
"""

from __future__ import annotations

import asyncio
import logging

from router.errors import OverloadedError
from router.idempotency.types import IdempotencyStore, Lease
from router.logs import ThrottledEvent, event

log = logging.getLogger("slorouter.idempotency")

# How long an in-flight marker outlives its holder's last renewal.
LEASE_S = 5.0
RENEWALS_PER_LEASE = 3  # two renewals may fail (a Redis blip, a busy loop) before it lapses

_unreachable = ThrottledEvent(log, "idempotency_lease_renewal_failed")


def keep_renewed(store: IdempotencyStore, lease: Lease, *, lease_s: float = LEASE_S,
                 until: float | None = None) -> asyncio.Task[None]:
    """A task renewing `lease` to `lease_s` every `lease_s / 3` until it is cancelled (the
    request settled), `until` (the event loop's clock: the request's deadline, after which a
    leaked lease lapses on its own) or the lease is found lost. Cancel it before settling."""
    return asyncio.ensure_future(_renew(store, lease, lease_s, until))


async def _renew(store: IdempotencyStore, lease: Lease, lease_s: float,
                 until: float | None) -> None:
    loop = asyncio.get_running_loop()
    every_s = lease_s / RENEWALS_PER_LEASE
    while until is None or loop.time() < until:
        await asyncio.sleep(every_s)
        try:
            if not await store.renew(lease, lease_s):
                # Expired (the holder stalled past it) and maybe won by a duplicate, or settled:
                # it is not taken back; the holder's own `complete` then changes nothing.
                event(log, "idempotency_lease_lost", logging.WARNING)
                return
        except OverloadedError as exc:  # store unreachable: try again at the next tick
            _unreachable.report(error=exc.code)
