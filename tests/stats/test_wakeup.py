"""`SpacedWakeup`: a waiter wakes at the first change once its spacing is over, not before."""

from __future__ import annotations

import asyncio

from router.stats.wakeup import SpacedWakeup


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _woken(wakeup: SpacedWakeup, waiter: asyncio.Task[float]) -> bool:
    for _ in range(3):
        await asyncio.sleep(0)
    return waiter.done()


def test_first_change_wakes_then_changes_within_the_spacing_do_not() -> None:
    async def scenario() -> None:
        clock = Clock()
        wakeup = SpacedWakeup(0.5, clock)
        wakeup.notify()  # nobody waits: nothing to remember
        first = asyncio.create_task(wakeup.wait())
        assert not await _woken(wakeup, first)
        wakeup.notify()
        assert await _woken(wakeup, first)
        assert first.result() == 100.0

        second = asyncio.create_task(wakeup.wait())
        clock.now = 100.4
        wakeup.notify()  # 0.4 s after the last wake: too soon
        assert not await _woken(wakeup, second)
        clock.now = 100.5
        wakeup.notify()
        assert await _woken(wakeup, second)
        assert second.result() == 100.5

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_nothing_parked() -> None:
    async def scenario() -> None:
        wakeup = SpacedWakeup(0.1, Clock())
        waiter = asyncio.create_task(wakeup.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        wakeup.notify()  # must not touch a dead event
        again = asyncio.create_task(wakeup.wait())
        await asyncio.sleep(0)
        wakeup.notify()
        assert await _woken(wakeup, again)

    asyncio.run(scenario())
