"""Fault matrix on the real service: 5xx, hangs, 429 storms, cut streams, duplicate actions.

One router process (module scope) in front of the package's simulator. Every scenario has its
own deployments and simulator models, so the simulator's `/control/stats` counts exactly the
upstream calls that scenario caused, and each deployment's breaker is its scenario's alone.
Most models have a faulty and a healthy replica; prompts differ per request, so prefix
affinity spreads first attempts over both as it would real traffic, until what the router has
seen of the faulty one (its errors) moves it behind the healthy one. The breaker scenarios
(hangs, 429 storms) route through a task's policy instead, its one candidate the faulty model
and the healthy one its fallback: a candidate stays first whatever the ranking thinks of it,
so its breaker alone keeps traffic off it, as for any policy with a single candidate.
Breaker states come from the router's `GET /v1/health/deployments`. Timing assertions are lower
bounds or generous upper bounds on the simulator's configured delays.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence

import httpx
import openai
import pytest

from router.providers.simulator.client import SimulatorControl
from tests.faults.scenarios import (
    API_KEY,
    CHAT_HEADERS,
    FAULT_MODELS,
    HANGING,
    MATRIX_POLICIES,
    MESSAGES,
    TENANT_ENV,
    THROTTLED,
    Call,
    Dep,
    Shot,
    SimCounters,
    breaker_states,
    chat_body,
    closed_loop,
    open_loop,
    router_yaml,
    run,
    send,
    varied_body,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

HANG_TIMEOUT_S = 0.4  # the hanging deployment's per-attempt timeout
COOL_DOWN_S = 2.0  # breaker cool-down before a half-open probe
RETRY_AFTER_SLACK_S = 5.0  # how long after Retry-After a second call may take to come
MAX_TRIES = 20  # requests sent until the router happens to try the faulty deployment first
DEPS = [
    Dep("fivexx-bad", "fivexx-bad"), Dep("fivexx-good", "fivexx-good"),
    Dep("hang", "hang", timeout_s=HANG_TIMEOUT_S), Dep("hang-backup", "hang-backup"),
    Dep("limited", "limited"), Dep("limited-backup", "limited-backup"),
    Dep("limited-solo", "limited-solo"),
    Dep("pt-cut-abort", "cut-abort"), Dep("ll-cut-abort", "cut-abort", "litellm"),
    Dep("pt-cut-eof", "cut-eof"), Dep("ll-cut-eof", "cut-eof", "litellm"),
    Dep("cut-backup", "cut-backup"),
    # the same faults again for the later scenarios: each starts on a replica nothing has
    # seen fail yet (the router keeps what it saw of a replica for the whole module)
    Dep("pt-cut-abort-whole", "cut-abort"),
    Dep("pt-cut-eof-lose", "cut-eof"), Dep("ll-cut-abort-lose", "cut-abort", "litellm"),
    Dep("act", "act"),
    Dep("pt-act-drop", "act-drop"), Dep("ll-act-drop", "act-drop", "litellm"),
    Dep("pt-act-eof", "act-eof"), Dep("ll-act-eof", "act-eof", "litellm"),
]
CUT_MODELS = ["pt-cut-abort", "ll-cut-abort", "pt-cut-eof", "ll-cut-eof"]
LOSING_MODELS = ["pt-cut-eof-lose", "ll-cut-abort-lose"]
MODELS: dict[str, list[str]] = {
    "five-xx": ["fivexx-bad", "fivexx-good"],  # the failing deployment is tried first
    "hanging": ["hang"],
    "hanging-backup": ["hang-backup"],
    "throttled": ["limited"],
    "throttled-backup": ["limited-backup"],
    "throttled-solo": ["limited-solo"],
    **{name: [name, "cut-backup"]
       for name in [*CUT_MODELS, "pt-cut-abort-whole", *LOSING_MODELS]},
    "act": ["act"],
    "pt-act-drop": ["pt-act-drop"],
    "ll-act-drop": ["ll-act-drop"],
    # a healthy deployment behind each: an action must not fail over to it once sent
    "pt-act-eof": ["pt-act-eof", "act"],
    "ll-act-eof": ["ll-act-eof", "act"],
}
RELIABILITY = f"""    breaker:
      cool_down_s: {COOL_DOWN_S}"""


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    config = router_yaml(sim.base_url, DEPS, MODELS, RELIABILITY, MATRIX_POLICIES)
    running = start_router(tmp_path_factory.mktemp("faults-router"), config, env=TENANT_ENV)
    yield running
    running.stop()


@pytest.fixture
def client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30, default_headers=CHAT_HEADERS)


def post(gateway: Running, model: str, headers: dict[str, str] | None = None,
         stream: bool = False) -> Shot:
    """One request with a prompt of its own, sent and read to the end."""
    return run(_one(gateway.base_url, Call(varied_body(model, stream), headers or {})))


async def _one(base: str, call: Call) -> Shot:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        return await send(http, call)


def describe(shots: Sequence[Shot]) -> str:
    return str(Counter((s.status, s.error_code) for s in shots))


# ------------------------------------------------------------------ one deployment 30% 5xx

FIVEXX = ["fivexx-bad", "fivexx-good"]
FIVEXX_REQUESTS = 400
FIVEXX_RATE = 50.0


def test_thirty_percent_5xx_on_one_of_two_deployments_is_invisible_to_clients(
        gateway: Running, counters: SimCounters) -> None:
    """One of two deployments fails 30% with 500: >= 99.9% client success, <= 1.2 calls/request."""
    before = counters.snapshot(FIVEXX)
    errors_before = counters.value("fivexx-bad", "errors_total")
    calls = [Call(varied_body("five-xx")) for _ in range(FIVEXX_REQUESTS)]
    shots = run(open_loop(gateway.base_url, calls, FIVEXX_RATE))
    after = counters.snapshot(FIVEXX)
    upstream = sum(after[m] - before[m] for m in FIVEXX)
    success = sum(s.ok for s in shots) / len(shots)
    amplification = upstream / len(shots)
    summary = (f"success {success:.2%}, {upstream} upstream calls for {len(shots)} requests "
               f"({amplification:.3f}/request; per deployment "
               f"{ {m: after[m] - before[m] for m in FIVEXX} }), outcomes {describe(shots)}")
    assert counters.value("fivexx-bad", "errors_total") > errors_before, "no fault injected"
    assert success >= 0.999, summary
    assert amplification <= 1.2, summary


# ------------------------------------------------------------------ a hanging deployment

def test_hanging_deployment_falls_back_within_the_deadline_and_its_breaker_cycles(
        gateway: Running, sim: Running, counters: SimCounters) -> None:
    """Hangs fall back within the deadline; the breaker opens by 5 hangs and closes on healing."""
    deadline_s = 3.0
    headers = {**HANGING, "x-slorouter-timeout-ms": str(int(deadline_s * 1000))}
    served: list[Shot] = []
    hangs_when_open = None
    for _ in range(MAX_TRIES):
        served.append(post(gateway, "auto", headers))
        if breaker_states(gateway.base_url).get("hang") == "open":
            hangs_when_open = counters.value("hang", "hangs")
            break
    assert all(s.ok and s.deployment == "hang-backup" for s in served), describe(served)
    assert max(s.e2e_s for s in served) < deadline_s
    assert hangs_when_open is not None, breaker_states(gateway.base_url)
    assert hangs_when_open <= 5

    calls_while_open = counters.value("hang")
    quick = [post(gateway, "auto", headers) for _ in range(4)]
    assert all(s.ok and s.deployment == "hang-backup" for s in quick), describe(quick)
    assert counters.value("hang") == calls_while_open  # an open breaker sends nothing
    assert all(s.e2e_s < HANG_TIMEOUT_S for s in quick)  # and waits for no timeout

    control = SimulatorControl(sim.base_url)
    control.set_profile("hang", {"hang_rate": 0.0})
    try:
        _wait_for_state(gateway, "hang", "half_open", COOL_DOWN_S * 5)
        probes: list[Shot] = []
        while not any(p.deployment == "hang" for p in probes) and len(probes) < MAX_TRIES:
            probes.append(post(gateway, "auto", headers))
        assert all(p.ok for p in probes), describe(probes)
        assert any(p.deployment == "hang" for p in probes), describe(probes)
        assert breaker_states(gateway.base_url)["hang"] == "closed"
    finally:
        control.set_profile("hang", {"hang_rate": FAULT_MODELS["hang"]["hang_rate"]})


def _wait_for_state(gateway: Running, deployment: str, state: str, within_s: float) -> None:
    until = time.monotonic() + within_s
    while breaker_states(gateway.base_url).get(deployment) != state:
        assert time.monotonic() < until, (deployment, breaker_states(gateway.base_url))
        time.sleep(0.05)


# ------------------------------------------------------------------ 429 storms

def test_429_storm_moves_load_elsewhere_and_waits_retry_after_before_calling_again(
        gateway: Running, counters: SimCounters) -> None:
    """A deployment that throttles every call is held once its 429s repeat (`holds_after`, 2):
    after its second 429 it gets no call before Retry-After has passed, then one probe; the
    backup serves every request."""
    retry_after_s = float(str(FAULT_MODELS["limited"]["retry_after_s"]))
    holds_after = 2  # the breaker's default
    base = counters.value("limited")
    seen: list[tuple[float, float, int]] = []  # (sent, ended, calls to `limited` by the end)
    shots = []
    give_up = time.monotonic() + 3 * retry_after_s + RETRY_AFTER_SLACK_S
    while time.monotonic() < give_up and (not seen or seen[-1][2] <= holds_after):
        shot = post(gateway, "auto", THROTTLED)
        shots.append(shot)
        seen.append((shot.sent_at, shot.sent_at + shot.e2e_s, counters.value("limited") - base))
    assert all(s.ok and s.deployment == "limited-backup" for s in shots), describe(shots)
    # the 429 that started the hold came while the first request that saw it was in flight:
    # a further call before that request was sent + Retry-After would be early
    held_from = next(sent for sent, _, calls in seen if calls >= holds_after)
    early = [calls for _, ended, calls in seen if ended < held_from + retry_after_s]
    assert early and max(early) == holds_after, seen
    assert seen[-1][2] == holds_after + 1, seen  # called again once the time had passed


def test_throttled_last_deployment_is_retried_no_sooner_than_retry_after(
        client: openai.OpenAI, counters: SimCounters) -> None:
    """With nowhere else to go, a 429 is retried only after Retry-After, then surfaces as 429."""
    retry_after_s = float(str(FAULT_MODELS["limited-solo"]["retry_after_s"]))
    before = counters.value("limited-solo")
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="throttled-solo", messages=MESSAGES)  # type: ignore[arg-type]
    elapsed = time.monotonic() - started
    calls = counters.value("limited-solo") - before
    assert calls >= 1
    assert elapsed >= (calls - 1) * retry_after_s, (calls, elapsed)
    assert caught.value.response.headers.get("retry-after") is not None


# ------------------------------------------------------------------ cut streams

@pytest.mark.parametrize("model", CUT_MODELS)
def test_stream_cut_mid_answer_is_an_error_in_the_client_not_a_truncated_success(
        client: openai.OpenAI, counters: SimCounters, model: str) -> None:
    """A stream cut after content (abort or EOF) raises in the SDK, with no failover after it."""
    cut_model = model.split("-", 1)[1]
    for _ in range(MAX_TRIES):
        backup_before = counters.value("cut-backup")
        cuts_before = counters.value(cut_model, "cut_streams")
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=varied_body()["messages"], stream=True)
        received = []
        if raw.headers["x-slorouter-model"] == "cut-backup":
            received = list(raw.parse())  # this prompt's replica is the healthy one: clean
            assert received and counters.value(cut_model, "cut_streams") == cuts_before
            continue
        with pytest.raises(openai.APIError) as broken:
            for chunk in raw.parse():
                received.append(chunk)
        assert broken.value.code == "upstream_stream_cut"  # either adapter, abort or EOF
        assert any(c.choices and c.choices[0].delta.content for c in received)
        assert counters.value(cut_model, "cut_streams") == cuts_before + 1
        assert counters.value("cut-backup") == backup_before  # no failover after content
        return
    pytest.fail(f"no stream of {MAX_TRIES} started on {model}")


def test_cut_non_streamed_answer_fails_over_before_anything_was_sent(
        gateway: Running, counters: SimCounters) -> None:
    """A non-streamed call whose connection drops sent the client nothing: the backup serves it."""
    cuts_before = counters.value("cut-abort", "cut_streams")
    shots: list[Shot] = []
    while counters.value("cut-abort", "cut_streams") == cuts_before and len(shots) < MAX_TRIES:
        shots.append(post(gateway, "pt-cut-abort-whole"))
    assert counters.value("cut-abort", "cut_streams") > cuts_before, "never cut"
    assert all(s.ok and s.deployment == "cut-backup" for s in shots), describe(shots)


CUT_REQUESTS = 20


@pytest.mark.parametrize("model", LOSING_MODELS)
def test_a_deployment_whose_streams_break_after_they_start_loses_its_traffic(
        gateway: Running, counters: SimCounters, model: str) -> None:
    """Every stream of the cutting replica breaks after its first content: each counts against
    it (not as the success its first token looked like), for its breaker and for the ranking,
    so it loses its traffic to the healthy replica: within five breaks at the latest (its
    breaker would open), and in practice after one (an occasional exploration probe aside)."""
    shots = [post(gateway, model, stream=True) for _ in range(CUT_REQUESTS)]
    broken = [s for s in shots if s.deployment == model]
    assert broken, describe(shots)  # affinity sends about half of the first ones to it
    assert all(s.stream_error and s.content_chunks > 0 for s in broken)
    assert len(broken) <= 5, describe(shots)
    health = httpx.get(f"{gateway.base_url}/v1/health/deployments", timeout=10).json()
    mine = next(d for d in health["deployments"] if d["deployment"] == model)
    assert mine["window_failures"] >= len(broken)
    served = [s for s in shots if s.deployment != model]
    assert all(s.ok and s.deployment == "cut-backup" for s in served), describe(served)

# ------------------------------------------------------------------ idempotency of actions

ACTION_MESSAGES = [{"role": "user", "content": "Book a table for two at 7pm tonight."}]
DUPLICATES = 100


def test_concurrent_duplicates_of_an_action_make_exactly_one_upstream_call(
        gateway: Running, counters: SimCounters) -> None:
    """100 concurrent copies of one keyed `action`: one upstream call, the same answer for all."""
    headers = {"x-slorouter-task": "action", "idempotency-key": f"faults-{uuid.uuid4()}"}
    call = Call(chat_body("auto", messages=ACTION_MESSAGES), headers)
    before = counters.value("act")
    shots = run(closed_loop(gateway.base_url, [call] * DUPLICATES, concurrency=DUPLICATES))
    assert counters.value("act") - before == 1
    assert all(s.status == 200 for s in shots), describe(shots)
    assert len({s.response_id for s in shots}) == 1


def test_action_without_an_idempotency_key_is_refused_before_any_upstream_call(
        gateway: Running, counters: SimCounters) -> None:
    """The action policy requires a key: without one the request is a 400 and nothing runs."""
    before = counters.value("act")
    shot = post(gateway, "auto", {"x-slorouter-task": "action"})
    assert (shot.status, shot.error_code) == (400, "idempotency_key_required")
    assert counters.value("act") == before


def test_reusing_an_idempotency_key_with_another_body_is_a_422(
        gateway: Running, counters: SimCounters) -> None:
    """The same key with a different body is refused (422) instead of replaying the first."""
    headers = {"x-slorouter-task": "action", "idempotency-key": f"faults-{uuid.uuid4()}"}
    first = run(_one(gateway.base_url, Call(chat_body("auto", messages=ACTION_MESSAGES),
                                            headers)))
    other = run(_one(gateway.base_url, Call(chat_body("auto"), headers)))
    assert first.status == 200
    assert (other.status, other.error_code) == (422, "idempotency_key_reuse")


@pytest.mark.parametrize("model", ["pt-act-drop", "ll-act-drop"])
def test_an_action_whose_upstream_drops_the_connection_unanswered_runs_once(
        gateway: Running, counters: SimCounters, model: str) -> None:
    """The upstream takes an action and closes the connection without answering: it may have
    acted, so the client gets 504 `unknown_commit` after exactly one upstream call (no silent
    re-send on a new connection, no retry), with both adapters. The pool holds an idle
    keep-alive connection to the simulator first, as it does in service."""
    assert post(gateway, "act").ok
    before = counters.value("act-drop")
    shot = post(gateway, model, {"x-slorouter-task": "action",
                                 "idempotency-key": f"faults-{uuid.uuid4()}"})
    assert (shot.status, shot.error_code) == (504, "unknown_commit")
    assert counters.value("act-drop") - before == 1


@pytest.mark.parametrize("model", ["pt-act-eof", "ll-act-eof"])
def test_an_action_whose_stream_ends_before_any_content_is_not_sent_elsewhere(
        gateway: Running, counters: SimCounters, model: str) -> None:
    """The upstream answers 200 and ends the stream cleanly before any content or finish
    reason: it had the request, so a side-effecting one may have run. The client gets 504
    `unknown_commit` after that one upstream call, never a failover to the healthy deployment
    behind it, with both adapters (litellm reports such a stream as a provider that is
    unavailable, which means "never received" and is failed over)."""
    for _ in range(MAX_TRIES):
        eof_before, act_before = counters.value("act-eof"), counters.value("act")
        shot = post(gateway, model, {"x-slorouter-task": "action",
                                     "idempotency-key": f"faults-{uuid.uuid4()}"}, stream=True)
        if counters.value("act-eof") == eof_before:  # this prompt went to `act` first
            assert shot.ok and shot.deployment == "act"
            continue
        assert (shot.status, shot.error_code) == (504, "unknown_commit"), describe([shot])
        assert counters.value("act-eof") - eof_before == 1
        assert counters.value("act") == act_before
        return
    pytest.fail(f"no request of {MAX_TRIES} went to {model} first")


async def _leave_after(base: str, call: Call, seconds: float) -> Shot:
    """Send `call` and leave (close the connection) after `seconds`, before any answer."""
    async with httpx.AsyncClient(base_url=base, timeout=seconds) as impatient:
        return await send(impatient, call)


@pytest.mark.parametrize("task,runs_again", [("action", False), ("chat", True)])
def test_a_side_effect_whose_client_left_mid_call_is_never_run_again_under_its_key(
        gateway: Running, counters: SimCounters, task: str, runs_again: bool) -> None:
    """The client leaves while its request is upstream (`act` answers after 300 ms). A side
    effect may have run, so its key keeps a 504 `unknown_commit` that a duplicate gets without
    a second upstream call (it used to be released, and the duplicate ran the action again);
    a read's key is released, and its duplicate runs."""
    call = Call(chat_body("act", messages=ACTION_MESSAGES),
                {"x-slorouter-task": task, "idempotency-key": f"faults-left-{uuid.uuid4()}"})
    before = counters.value("act")
    left = run(_leave_after(gateway.base_url, call, 0.1))
    time.sleep(0.5)  # the abandoned call has reached the simulator and been settled
    duplicate = run(_one(gateway.base_url, call))
    assert left.status == 0  # the client timed out and left
    if runs_again:
        assert duplicate.ok and counters.value("act") - before == 2
    else:
        assert (duplicate.status, duplicate.error_code) == (504, "unknown_commit")
        assert counters.value("act") - before == 1


@pytest.mark.parametrize("model", ["pt-cut-abort", "ll-cut-abort"])
def test_a_side_effect_whose_stream_broke_after_content_is_never_run_again_under_its_key(
        gateway: Running, counters: SimCounters, model: str) -> None:
    """The upstream streams three chunks of an action and drops the connection: the client gets
    an error event, and the key keeps a 504 `unknown_commit` for its duplicates, never a second
    run on the same or the healthy deployment (the key used to be released)."""
    for _ in range(MAX_TRIES):
        deployments = ["cut-abort", "cut-backup"]
        before = counters.snapshot(deployments)
        call = Call(varied_body(model, True),
                    {"x-slorouter-task": "action", "idempotency-key": f"faults-{uuid.uuid4()}"})
        first = run(_one(gateway.base_url, call))
        if counters.value("cut-abort") == before["cut-abort"]:  # went to the backup first
            assert first.ok
            continue
        assert first.status == 200 and first.stream_error and first.content_chunks > 0
        duplicate = run(_one(gateway.base_url, Call({**call.body, "stream": False},
                                                    call.headers)))
        assert (duplicate.status, duplicate.error_code) == (504, "unknown_commit")
        after = counters.snapshot(deployments)
        assert {d: after[d] - before[d] for d in deployments} == {"cut-abort": 1, "cut-backup": 0}
        return
    pytest.fail(f"no request of {MAX_TRIES} went to {model} first")
