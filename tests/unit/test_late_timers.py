"""A timeout that fires late (the process was paused) lets the I/O already waiting be read first.

The pause audit of 2026-12-06 stopped a router (SIGSTOP) for 25 s while six requests waited on an
8 s upstream: the upstream answered all six in time, yet each client got a 504
`first_token_timeout` and the deployment's breaker opened, because on resume uvloop runs the
expired timers before it polls the sockets. Here the loop is stopped by blocking it
(`time.sleep`), which leaves timers and sockets in the same state as a stopped process.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from router.execution import late_timers

PAUSE_S = 0.6  # past the 0.2 s timeouts below by more than `LATE_S`


def _on_uvloop(main: Callable[[], Awaitable[Any]]) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


async def _read_answered_before_a_pause(send_answer: bool) -> bytes:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        async def read() -> bytes:
            async with late_timers.timeout(0.2):
                return await reader.read(100)

        task = asyncio.create_task(read())
        await asyncio.sleep(0.05)  # the read is waiting
        if send_answer:
            theirs.send(b"answer")  # the answer arrives in time...
        time.sleep(PAUSE_S)  # ...and the process stops past the timeout before reading it
        return await task
    finally:
        writer.close()
        theirs.close()


def test_an_answer_that_arrived_before_the_deadline_is_read_after_a_pause() -> None:
    assert _on_uvloop(lambda: _read_answered_before_a_pause(send_answer=True)) == b"answer"


def test_a_late_timeout_with_nothing_waiting_still_expires() -> None:
    with pytest.raises(TimeoutError):
        _on_uvloop(lambda: _read_answered_before_a_pause(send_answer=False))


async def test_a_timeout_on_time_fires_as_asyncio_s_does() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with late_timers.timeout(0.05):
            await asyncio.sleep(5)
    assert time.monotonic() - started < 4  # cut by the timeout, not by the sleep's end
    async with late_timers.timeout(None):  # no limit
        await asyncio.sleep(0)
    async with late_timers.timeout(5):  # a block that ends first is left alone
        await asyncio.sleep(0)


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def waits() -> None:
        async with late_timers.timeout(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(waits())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_bare_future_s_timer_defers_once_when_late() -> None:
    """As the pass-through client waits for its next chunk: a protocol's `data_received` wakes
    a future that a timer fails at the deadline. The loop stops inside another connection's
    callback, after the answer arrived (so the next turn of the loop runs its timers before it
    polls the sockets again)."""

    async def main() -> str:
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        ours, theirs = socket.socketpair()
        other, sender = socket.socketpair()

        class Wakes(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                if not answered.done():
                    answered.set_result(None)

        class Stalls(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                theirs.send(b"x")  # the answer arrives in time...
                time.sleep(PAUSE_S)  # ...while the process is stopped in another callback

        def expire(future: asyncio.Future[None]) -> None:
            if not future.done():
                future.set_exception(TimeoutError())

        transports = [(await loop.create_connection(Wakes, sock=ours))[0],
                      (await loop.create_connection(Stalls, sock=other))[0]]
        try:
            late_timers.expire_future_at(loop, loop.time() + 0.2, expire, answered)
            await asyncio.sleep(0.05)
            sender.send(b"go")
            await answered
            return "answered"
        except TimeoutError:
            return "expired"
        finally:
            for transport in transports:
                transport.close()
            theirs.close()
            sender.close()

    assert _on_uvloop(main) == "answered"
