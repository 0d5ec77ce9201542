"""A shared Redis that refuses writes, or stalls a keyed request's claim, under a running router.

Out of memory under `noeviction` (`CONFIG SET maxmemory 1`) or made a read-only replica of a
second server (`REPLICAOF`): PING and reads still work, every write is refused. The router
learns it from the writes it makes anyway (a keyed request's claim, an experiment's outcome):
`/readyz` stays 200 (every replica shares that Redis: taking them all out would refuse the
requests that need no Redis too) but lists `idempotency` and `experiments` under `degraded`,
with the reason; once Redis takes writes again, `/readyz` clears it by itself (its own probe
write, no request needed) and keyed requests are served again. A claim Redis does not answer
ends at the request's deadline. Real redis-servers, the
package's simulator, the router as a process, the `openai` client.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.experiments_service.support import API_KEY, AUTH, TENANT_ENV, router_yaml
from tests.support.procs import ManagedProcess
from tests.support.redis_breakage import (
    REFUSAL_IDS,
    cannot_persist,
    memory_back,
    out_of_memory,
    promoted,
    read_only,
    snapshots_off,
)
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: refusals
    tasks: [classification]
    unit: request
    salt: refusals-1
    arms:
      - {name: control, route: "model:steady", control: true, share: 0.5}
      - {name: other, route: "model:meh", share: 0.5}
    metrics:
      - {name: thumbs_up, kind: binary}"""

Breakage = Callable[[redis.Redis, ManagedProcess], None]


def _read_only_after_failover(client: redis.Redis, primary: ManagedProcess) -> None:
    read_only(client, primary.port)  # as after a failover: now a replica of a live primary


def _alone(breakage: Callable[[redis.Redis], None]) -> Breakage:
    """A breakage or mend of `redis_breakage` that needs no primary."""
    return lambda client, _primary: breakage(client)


@pytest.fixture
def shared(sim: Running, tmp_path: Path
           ) -> Iterator[tuple[Running, ManagedProcess, ManagedProcess]]:
    """The router with idempotency and experiments on `store`; `primary`, a second server
    `store` can be made a replica of."""
    with ExitStack() as started:  # the servers stopped even when the router fails to start
        for name in ("store", "primary"):
            (tmp_path / name).mkdir()
        (tmp_path / "store" / "data").mkdir()  # its snapshots' own directory, to remove
        store = start_redis(tmp_path / "store", ("--dir", str(tmp_path / "store" / "data")))
        started.callback(store.stop)
        primary = start_redis(tmp_path / "primary")
        started.callback(primary.stop)
        url = f"redis://127.0.0.1:{store.port}/0"
        config = router_yaml(sim.base_url, ["steady", "meh"], ["steady", "meh"], {},
                             EXPERIMENT, experiments_redis_url=url)
        config = config.replace("  experiments_redis_url:", f"  idempotency_redis_url: {url}\n"
                                "  experiments_redis_url:")
        router = start_router(tmp_path, config, env=TENANT_ENV, name="refusals")
        started.callback(router.stop)
        yield router, store, primary


def _ready(router: Running) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{router.base_url}/readyz", headers=AUTH, timeout=10)
    return answer.status_code, answer.json()


def _keyed(chat: openai.OpenAI, key: str) -> str:
    done = chat.chat.completions.create(
        model="auto", max_tokens=8, messages=[{"role": "user", "content": f"pay {key}"}],
        extra_headers={"Idempotency-Key": key, "x-slorouter-task": "classification"})
    return str(done.choices[0].message.content)


@pytest.mark.parametrize(("breaks", "mends", "reason"), [
    (_alone(out_of_memory), _alone(memory_back), "out of memory"),
    (_read_only_after_failover, _alone(promoted), "read-only replica"),
    (_alone(cannot_persist), _alone(snapshots_off), "cannot persist (MISCONF)"),
], ids=REFUSAL_IDS)
def test_a_redis_refusing_writes_shows_in_readyz_and_clears_when_it_takes_them_again(
        shared: tuple[Running, ManagedProcess, ManagedProcess], breaks: Breakage,
        mends: Breakage, reason: str) -> None:
    """Refused writes make `/readyz` list the stores as degraded (200, `ready`) with the
    reason and what it costs; keyed requests are refused with a 503 that names the refusal,
    unkeyed ones are served; once writes are taken again `/readyz` clears without traffic."""
    router, store, primary = shared
    chat = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=20)
    admin = redis.Redis(port=store.port)
    try:
        assert _keyed(chat, "before")
        status, before = _ready(router)
        assert (status, before["status"], before["degraded"]) == (200, "ready", [])

        breaks(admin, primary)
        with pytest.raises(openai.APIStatusError) as refused:
            _keyed(chat, "during")
        assert refused.value.status_code == 503
        error = refused.value.body
        assert isinstance(error, dict) and error["code"] == "idempotency_store_unavailable"
        assert f"refusing writes ({reason}" in error["message"], error
        served = chat.chat.completions.create(  # no key: served, its outcome write refused
            model="auto", max_tokens=8, messages=[{"role": "user", "content": "sort this"}],
            extra_headers={"x-slorouter-task": "classification"})
        assert served.choices[0].message.content
        waited_until = time.monotonic() + 10  # the outcome is written in the background
        while True:
            status, during = _ready(router)
            if "experiments" in during["degraded"] or time.monotonic() > waited_until:
                break
            time.sleep(0.05)
        assert (status, during["status"]) == (200, "ready"), during
        assert set(during["degraded"]) >= {"idempotency", "experiments"}, during
        idempotency = during["checks"]["idempotency"]
        assert idempotency["ok"] and idempotency["degraded"], idempotency
        assert idempotency["detail"].startswith(f"redis refuses writes ({reason}"), idempotency
        assert "Idempotency-Key are refused (503)" in idempotency["detail"], idempotency
        assert during["checks"]["experiments"]["detail"].startswith(
            f"redis refuses writes ({reason}"), during

        mends(admin, primary)
        status, after = _ready(router)  # no request in between: its own probe sees it
        assert (status, after["status"], after["degraded"]) == (200, "ready", []), after
        assert after["checks"]["idempotency"]["detail"] == "redis", after
        assert _keyed(chat, "after")
    finally:
        admin.close()
        chat.close()
    log = router.proc.log_text()
    assert "redis_writes_refused" in log and "redis_writes_accepted" in log, log
    assert "pay during" not in log  # prompt text never reaches the log


def test_a_keyed_claim_ends_at_the_request_deadline_and_the_same_key_may_be_retried(
        shared: tuple[Running, ManagedProcess, ManagedProcess]) -> None:
    """Redis stopped (SIGSTOP: connections open, no replies) under a keyed request with a
    400 ms deadline: the claim is given up at the deadline with a 504 `deadline_exceeded`
    saying nothing ran and the key may be retried (it waited its 1 s command timeout and
    answered 503 before); once Redis answers again, the same request with the same key runs
    (the lease the stalled SET set late is given back)."""
    router, store, _ = shared
    chat = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=20)
    request: dict[str, Any] = {
        "model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "pay 5"}],
        "extra_headers": {"Idempotency-Key": "stalled", "x-slorouter-task": "classification",
                          "x-slorouter-timeout-ms": "400"}}
    try:
        assert _keyed(chat, "warm-up")  # the pool holds a connection: the stall hits the SET
        os.kill(store.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as timed_out:
                chat.chat.completions.create(**request)
            took_s = time.monotonic() - started
        finally:
            os.kill(store.pid, signal.SIGCONT)
        retried = chat.chat.completions.create(**{**request, "extra_headers": {
            **request["extra_headers"], "x-slorouter-timeout-ms": "5000"}})
    finally:
        chat.close()
    error = timed_out.value.body
    assert timed_out.value.status_code == 504, error
    assert isinstance(error, dict) and error["code"] == "deadline_exceeded", error
    assert "retried with the same key" in error["message"], error
    assert timed_out.value.response.headers.get("x-should-retry") != "false"
    assert took_s < 1.0, took_s  # the command timeout (1 s) no longer decides
    assert retried.choices[0].message.content
