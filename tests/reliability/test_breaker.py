"""Circuit breakers: trip on consecutive failures or error rate, cool down, probe, recover."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from router.execution.breaker import BreakerPolicy, BreakerRegistry, BreakerState, CircuitBreaker
from tests.reliability.fakes import FakeClock

POLICY = BreakerPolicy(
    consecutive_failures=5, error_rate=0.5, min_volume=20, window_s=10.0, cool_down_s=5.0
)
LEGAL: set[tuple[BreakerState, BreakerState]] = {
    ("closed", "open"),
    ("open", "half_open"),
    ("half_open", "closed"),
    ("half_open", "open"),
}


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        assert breaker.allow()
        breaker.on_failure()


def test_opens_after_consecutive_failures_not_before() -> None:
    """N-1 consecutive failures keep it closed; the Nth opens it and blocks attempts."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    fail(breaker, POLICY.consecutive_failures - 1)
    assert breaker.state() == "closed"
    fail(breaker, 1)
    assert breaker.state() == "open"
    assert not breaker.allow()


def test_success_resets_the_consecutive_count() -> None:
    """A success between failures restarts the consecutive-failure count."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    fail(breaker, POLICY.consecutive_failures - 1)
    breaker.on_success()
    fail(breaker, POLICY.consecutive_failures - 1)
    assert breaker.state() == "closed"


def test_error_rate_trips_only_with_minimum_volume() -> None:
    """Alternating failures (50%) trip the breaker once the window holds min_volume calls."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    for n in range(POLICY.min_volume):
        assert breaker.state() == "closed", n
        assert breaker.allow()
        if n % 2:
            breaker.on_failure()
        else:
            breaker.on_success()
    assert breaker.state() == "open"


def test_cool_down_then_limited_probes_then_closed() -> None:
    """After the cool-down one probe is allowed; its success closes the breaker."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s - 0.01)
    assert breaker.state() == "open"
    clock.advance(0.02)
    assert breaker.state() == "half_open"
    assert breaker.allow()
    assert not breaker.allow()  # only half_open_probes=1 at a time
    breaker.on_success()
    assert breaker.state() == "closed"


def test_failed_probe_reopens_for_a_fresh_cool_down() -> None:
    """A failing half-open probe sends the breaker back to open for another cool-down."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    assert breaker.allow()
    breaker.on_failure()
    assert breaker.state() == "open"
    clock.advance(POLICY.cool_down_s - 0.01)
    assert breaker.state() == "open"


def test_abandoned_probe_frees_its_slot() -> None:
    """A cancelled probe (no verdict) lets the next probe through."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    assert breaker.allow()
    breaker.on_abandon()
    assert breaker.allow()


def test_retry_after_holds_the_deployment_open_once_throttling_repeats() -> None:
    """A 429 with Retry-After right after another failure keeps the breaker open that long."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    breaker.on_failure(retry_after_s=30.0)
    assert breaker.state() == "closed"  # one throttled answer: that request goes elsewhere
    breaker.on_failure(retry_after_s=30.0)
    clock.advance(29.0)
    assert breaker.state() == "open"
    clock.advance(1.0)
    assert breaker.state() == "half_open"


def test_sporadic_429s_among_successes_never_hold_the_deployment() -> None:
    """One 429 in twenty (each followed by successes) never opens the breaker: partial
    throttling must not turn into every request being refused."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    for i in range(200):
        assert breaker.allow()
        if i % 20 == 0:
            breaker.on_failure(retry_after_s=10.0)
        else:
            breaker.on_success()
    assert breaker.state() == "closed"


def test_a_half_open_probe_throttled_holds_for_its_retry_after() -> None:
    """The probe's 429 holds the breaker for the Retry-After, not only the cool-down."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    assert breaker.allow() and breaker.state() == "half_open"
    breaker.on_failure(retry_after_s=20.0)
    clock.advance(19.0)
    assert breaker.state() == "open"
    clock.advance(1.0)
    assert breaker.state() == "half_open"


def test_a_retry_after_holds_no_longer_than_max_hold() -> None:
    """A provider asking for a day is asked again by a probe after `max_hold_s`."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    breaker.on_failure(retry_after_s=100_000.0)
    breaker.on_failure(retry_after_s=100_000.0)
    assert breaker.probe_in_s() == POLICY.max_hold_s
    clock.advance(POLICY.max_hold_s)
    assert breaker.state() == "half_open"


ops = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0, 8)),
        st.tuples(
            st.sampled_from(["start", "success", "failure", "abandon", "retry_after"]),
            st.just(0.0),
        ),
    ),
    max_size=120,
)


def end_one(breaker: CircuitBreaker, verdict: str) -> None:
    if verdict == "success":
        breaker.on_success()
    elif verdict == "failure":
        breaker.on_failure()
    elif verdict == "retry_after":
        breaker.on_failure(retry_after_s=2.0)
    else:
        breaker.on_abandon()


@settings(max_examples=200)
@given(ops=ops, probes=st.integers(1, 3), to_close=st.integers(1, 3))
def test_state_machine_only_takes_legal_transitions(
    ops: list[tuple[str, float]], probes: int, to_close: int
) -> None:
    """Any sequence of events moves only along closed→open→half_open→(closed|open), never
    admits while open, always admits while closed, and never runs more probes than allowed."""
    clock = FakeClock()
    policy = BreakerPolicy(consecutive_failures=3, min_volume=4, cool_down_s=5.0,
                           half_open_probes=probes, successes_to_close=to_close)
    breaker = CircuitBreaker(policy, clock)
    before = breaker.state()
    pending = 0
    probes_granted = 0
    for op, amount in ops:
        if op == "advance":
            clock.advance(amount)
        elif op == "start":
            state = breaker.state()
            admitted = breaker.allow()
            assert admitted == (state != "open") or state == "half_open"
            pending += admitted
            probes_granted += admitted and state == "half_open"
            assert probes_granted <= probes
        elif pending:
            pending -= 1
            end_one(breaker, op)
            probes_granted = 0
        after = breaker.state()
        assert breaker.is_open() == (after == "open")
        if after != before:
            assert (before, after) in LEGAL
            probes_granted = 0
        before = after


def test_registry_snapshot_serialises_every_deployment() -> None:
    """The registry's snapshot lists each deployment's state as JSON-serialisable data."""
    clock = FakeClock()
    registry = BreakerRegistry(POLICY, clock)
    registry.get("b-deployment").on_success()
    fail(registry.get("a-deployment"), POLICY.consecutive_failures)
    payload = orjson.loads(registry.snapshot().model_dump_json())
    states = {d["deployment"]: d["state"] for d in payload["deployments"]}
    assert states == {"a-deployment": "open", "b-deployment": "closed"}
    assert payload["deployments"][0]["half_open_in_s"] == POLICY.cool_down_s


def test_registry_reads_open_circuits_by_name() -> None:
    """`is_open` is `state() == "open"`: false for a deployment never used or closed, true while
    its cool-down runs, false once it has elapsed (half-open)."""
    clock = FakeClock()
    registry = BreakerRegistry(POLICY, clock)
    registry.get("closed").on_success()
    fail(registry.get("tripped"), POLICY.consecutive_failures)
    assert [registry.is_open(name) for name in ("unused", "closed", "tripped")] == [
        False, False, True]
    assert [d.deployment for d in registry.snapshot().deployments] == [
        "closed", "tripped", "unused"]  # a deployment read is known, as one ranked always was
    clock.advance(POLICY.cool_down_s)
    assert registry.state("tripped") == "half_open" and not registry.is_open("tripped")


def test_openings_and_closings_are_told_with_the_deployment_and_hold() -> None:
    """What the service logs (`breaker_opened`, `breaker_closed`): an error storm used to leave
    no line at the default level. A failed half-open probe opens it again, and is told again."""
    clock = FakeClock()
    told: list[tuple[str, BreakerState, float | None]] = []
    registry = BreakerRegistry(POLICY, clock, on_change=lambda *change: told.append(change))
    breaker = registry.get("d1")
    fail(breaker, POLICY.consecutive_failures)
    assert not breaker.allow()
    assert told == [("d1", "open", POLICY.cool_down_s)]
    clock.advance(POLICY.cool_down_s)
    fail(breaker, 1)  # the probe fails: open again
    clock.advance(POLICY.cool_down_s)
    for _ in range(POLICY.successes_to_close):
        assert breaker.allow()
        breaker.on_success()
    assert told[1:] == [("d1", "open", POLICY.cool_down_s), ("d1", "closed", None)]
    assert registry.get("d2").state() == "closed" and len(told) == 3
