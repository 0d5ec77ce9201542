"""`/readyz`'s checks run at once, and a Redis check ends within its budget: a Redis that does
not answer in time is `redis slow` (degraded), and what only a new connection shows (credentials,
eviction policy) is looked at in the background at most once a while (an injected clock), its
look never holding a check past its budget.
Fake clients stand in for Redis: what is under test is the order and the bounds of the calls,
each bounded by `asyncio.wait_for` so that a check that would wait forever fails instead."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from router.api.meta import Readiness, readyz_endpoint
from router.readiness_redis import Look, NewConnections, StoreCheck, StoreRedis, check_store

LOST = "requests with an Idempotency-Key are refused (503)"
STORE = StoreCheck("idempotency", "server.idempotency_redis_url", while_down=LOST,
                   while_refused=LOST)


class FakeRedis:
    """A client whose PING answers at once, fails with `error`, or never answers."""

    def __init__(self, *, ping: str = "answer", error: BaseException | None = None) -> None:
        self.ping_mode = ping
        self.error = error
        self.calls: list[str] = []

    async def ping(self) -> bool:
        self.calls.append("ping")
        if self.ping_mode == "hang":
            await asyncio.Event().wait()
        if self.ping_mode == "fail":
            assert self.error is not None
            raise self.error
        return True


def _check(store: StoreCheck, client: FakeRedis, budget_s: float = 0.05) -> Readiness:
    async def bounded() -> Readiness:
        return await asyncio.wait_for(check_store(store, StoreRedis(client), budget_s), 5)

    return asyncio.run(bounded())


def test_the_checks_run_at_once() -> None:
    """A check waiting on another's progress ends: one after another, it waited forever (and
    each Redis check's round trips added up past a probe's timeout)."""
    async def scenario() -> dict[str, Any]:
        second_ran = asyncio.Event()

        async def first() -> Readiness:
            await second_ran.wait()
            return Readiness("first", True, "waited for the second")

        async def second() -> Readiness:
            second_ran.set()
            return Readiness("second", True, "ran")

        readyz = readyz_endpoint([first, second], "v1")
        answer = await asyncio.wait_for(readyz(None), 5)  # type: ignore[arg-type]
        body: dict[str, Any] = orjson.loads(answer.body)
        return body

    body = asyncio.run(scenario())
    assert body["status"] == "ready" and list(body["checks"]) == ["first", "second"], body


def test_a_redis_that_does_not_answer_within_the_budget_is_slow_not_waited_for() -> None:
    answer = _check(STORE, FakeRedis(ping="hang"))
    assert answer == Readiness("idempotency", True, "redis slow: no answer to PING within "
                               f"0.05 s (if it stays so: {LOST})", degraded=True)


def test_a_timeout_of_the_stores_own_client_is_slow_too() -> None:
    """The result cache's client gives up after 50 ms: a Redis slower than that fails every
    cache call, and `/readyz` said `redis` while its own client, with 0.2 s, got answers."""
    answer = _check(StoreCheck("cache", "server.cache.redis_url", while_down="serving uncached",
                               while_refused="new answers are not stored"),
                    FakeRedis(ping="fail", error=RedisTimeoutError("Timeout reading")))
    assert answer.degraded and answer.detail == (
        "redis slow: no answer to PING within the store's own timeout: serving uncached")


def test_a_redis_down_is_unavailable() -> None:
    answer = _check(STORE, FakeRedis(ping="fail", error=RedisConnectionError("refused")))
    assert answer.degraded and answer.detail == f"redis unavailable (ConnectionError): {LOST}"


class Looker:
    """Looks that answer what `found` holds at the time (an exception: never answers)."""

    def __init__(self, found: Look | None) -> None:
        self.found: Look | BaseException | None = found
        self.looks = 0

    async def __call__(self, url: str) -> Look | None:
        self.looks += 1
        if isinstance(self.found, BaseException):
            await asyncio.Event().wait()
        assert not isinstance(self.found, BaseException)
        return self.found


def _looking(looker: Looker, now: list[float]) -> StoreCheck:
    return StoreCheck(STORE.name, STORE.setting, LOST, LOST, records=True,
                      new_connections=NewConnections("redis://r", every_s=5.0,
                                                     clock=lambda: now[0], looker=looker))


async def _checked(store: StoreCheck, client: FakeRedis) -> Readiness:
    answer = await asyncio.wait_for(check_store(store, StoreRedis(client), 0.05), 5)
    await asyncio.sleep(0)  # a look begun in the background ends
    return answer


EVICTS = ("redis (maxmemory-policy allkeys-lru: Idempotency-Key records may be evicted, and a "
          "duplicate then runs again)")


def test_a_new_connection_is_looked_at_in_the_background_at_most_once_a_while() -> None:
    """The first look (credentials, eviction policy) is waited for; later ones are taken in
    the background at most every 5 s, each check reading the latest; one that finds no
    answer keeps the last. It was an `INFO memory` on a new connection at every probe."""
    now = [0.0]
    looker = Looker(Look(policy="allkeys-lru"))
    store = _looking(looker, now)
    client = FakeRedis()

    async def scenario() -> list[str]:
        details = [(await _checked(store, client)).detail]
        looker.found = Look()  # an operator sets noeviction
        now[0] = 4.9
        details.append((await _checked(store, client)).detail)  # not looked at again yet
        now[0] = 5.0
        details.append((await _checked(store, client)).detail)  # looked at, in the background
        details.append((await _checked(store, client)).detail)
        looker.found, now[0] = None, 10.0  # no answer: the last look stands
        details.append((await _checked(store, client)).detail)
        return details

    assert asyncio.run(scenario()) == [EVICTS, EVICTS, EVICTS, "redis", "redis"]
    assert looker.looks == 3 and client.calls == ["ping"] * 5


def test_a_look_that_hangs_holds_no_check_past_its_budget() -> None:
    """Nothing known yet and the look unanswered: the PING's answer stands, within the budget;
    the look goes on in the background, and no second one is begun meanwhile."""
    now = [0.0]
    looker = Looker(None)
    looker.found = TimeoutError()
    store = _looking(looker, now)

    async def scenario() -> list[Readiness]:
        first = await _checked(store, FakeRedis())
        now[0] = 60.0
        return [first, await _checked(store, FakeRedis())]

    assert asyncio.run(scenario()) == [Readiness("idempotency", True, "redis")] * 2
    assert looker.looks == 1


def test_credentials_refused_to_new_connections_are_named_while_open_ones_answer() -> None:
    """A password rotated under the service: the connections open still answer (Redis keeps
    them), new ones are refused; `/readyz` names the setting before they close."""
    why = "Redis refused to authenticate (a wrong or missing password in the URL, ...)"
    answer = asyncio.run(_checked(_looking(Looker(Look(refused=why)), [0.0]), FakeRedis()))
    assert answer == Readiness("idempotency", True, f"server.idempotency_redis_url: {why}, to "
                               "new connections (those open still answer): "
                               f"{LOST} once they close", degraded=True)
