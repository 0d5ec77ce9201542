"""Circuit breakers: trip on consecutive failures or error rate, cool down, probe, recover."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from router.execution.breaker import (
    REGULAR,
    BreakerPolicy,
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    Permit,
)
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
        permit = breaker.allow()
        assert permit is not None
        breaker.on_failure(permit)


def test_opens_after_consecutive_failures_not_before() -> None:
    """N-1 consecutive failures keep it closed; the Nth opens it and blocks attempts."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    fail(breaker, POLICY.consecutive_failures - 1)
    assert breaker.state() == "closed"
    fail(breaker, 1)
    assert breaker.state() == "open"
    assert breaker.allow() is None


def test_success_resets_the_consecutive_count() -> None:
    """A success between failures restarts the consecutive-failure count."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    fail(breaker, POLICY.consecutive_failures - 1)
    breaker.on_success(REGULAR)
    fail(breaker, POLICY.consecutive_failures - 1)
    assert breaker.state() == "closed"


def test_error_rate_trips_only_with_minimum_volume() -> None:
    """Alternating failures (50%) trip the breaker once the window holds min_volume calls."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    for n in range(POLICY.min_volume):
        assert breaker.state() == "closed", n
        permit = breaker.allow()
        assert permit is not None
        if n % 2:
            breaker.on_failure(permit)
        else:
            breaker.on_success(permit)
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
    probe = breaker.allow()
    assert probe is not None
    assert breaker.allow() is None  # only half_open_probes=1 at a time
    breaker.on_success(probe)
    assert breaker.state() == "closed"


def test_failed_probe_reopens_for_a_fresh_cool_down() -> None:
    """A failing half-open probe sends the breaker back to open for another cool-down."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    probe = breaker.allow()
    assert probe is not None
    breaker.on_failure(probe)
    assert breaker.state() == "open"
    clock.advance(POLICY.cool_down_s - 0.01)
    assert breaker.state() == "open"


def test_abandoned_probe_frees_its_slot() -> None:
    """A cancelled probe (no verdict) lets the next probe through."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    probe = breaker.allow()
    assert probe is not None
    breaker.on_abandon(probe)
    assert breaker.allow() is not None


def test_retry_after_holds_the_deployment_open_once_throttling_repeats() -> None:
    """A 429 with Retry-After right after another failure keeps the breaker open that long."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    breaker.on_failure(REGULAR, retry_after_s=30.0)
    assert breaker.state() == "closed"  # one throttled answer: that request goes elsewhere
    breaker.on_failure(REGULAR, retry_after_s=30.0)
    clock.advance(29.0)
    assert breaker.state() == "open"
    clock.advance(1.0)
    assert breaker.state() == "half_open"


def test_sporadic_429s_among_successes_never_hold_the_deployment() -> None:
    """One 429 in twenty (each followed by successes) never opens the breaker: partial
    throttling must not turn into every request being refused."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    for i in range(200):
        permit = breaker.allow()
        assert permit is not None
        if i % 20 == 0:
            breaker.on_failure(permit, retry_after_s=10.0)
        else:
            breaker.on_success(permit)
    assert breaker.state() == "closed"


def test_a_half_open_probe_throttled_holds_for_its_retry_after() -> None:
    """The probe's 429 holds the breaker for the Retry-After, not only the cool-down."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    probe = breaker.allow()
    assert probe is not None and breaker.state() == "half_open"
    breaker.on_failure(probe, retry_after_s=20.0)
    clock.advance(19.0)
    assert breaker.state() == "open"
    clock.advance(1.0)
    assert breaker.state() == "half_open"


def test_a_retry_after_holds_no_longer_than_max_hold() -> None:
    """A provider asking for a day is asked again by a probe after `max_hold_s`."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    breaker.on_failure(REGULAR, retry_after_s=100_000.0)
    breaker.on_failure(REGULAR, retry_after_s=100_000.0)
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


def end_one(breaker: CircuitBreaker, permit: Permit, verdict: str) -> None:
    if verdict == "success":
        breaker.on_success(permit)
    elif verdict == "failure":
        breaker.on_failure(permit)
    elif verdict == "retry_after":
        breaker.on_failure(permit, retry_after_s=2.0)
    else:
        breaker.on_abandon(permit)


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
    pending: list[Permit] = []
    for op, amount in ops:
        if op == "advance":
            clock.advance(amount)
        elif op == "start":
            state = breaker.state()
            admitted = breaker.allow()
            assert (admitted is not None) == (state != "open") or state == "half_open"
            if admitted is not None:
                pending.append(admitted)
            # the probes of this half-open spell in flight: never more than allowed, whatever
            # attempts from before it are still running
            spell = [p for p in pending if p.probe_of is not None and p == admitted]
            assert len(spell) <= probes
        elif pending:
            end_one(breaker, pending.pop(0), op)
        after = breaker.state()
        assert breaker.is_open() == (after == "open")
        if after != before:
            assert (before, after) in LEGAL
        before = after


def test_registry_snapshot_serialises_every_deployment() -> None:
    """The registry's snapshot lists each deployment's state as JSON-serialisable data."""
    clock = FakeClock()
    registry = BreakerRegistry(POLICY, clock)
    registry.get("b-deployment").on_success(REGULAR)
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
    registry.get("closed").on_success(REGULAR)
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
    assert breaker.allow() is None
    assert told == [("d1", "open", POLICY.cool_down_s, None)]
    clock.advance(POLICY.cool_down_s)
    fail(breaker, 1)  # the probe fails: open again
    clock.advance(POLICY.cool_down_s)
    for _ in range(POLICY.successes_to_close):
        probe = breaker.allow()
        assert probe is not None
        breaker.on_success(probe)
    assert told[1:] == [("d1", "open", POLICY.cool_down_s, None), ("d1", "closed", None, None)]
    assert registry.get("d2").state() == "closed" and len(told) == 3


def test_attempts_admitted_before_half_open_neither_free_its_probe_slot_nor_close_it() -> None:
    """Five long streams admitted while closed, then the circuit opens and goes half-open with
    its one probe in flight: the streams ending (left by their clients, or clean) free no
    probe slot and close nothing; only the probe's own success closes it. Before, each ending
    let one more request through to the recovering deployment, and clean endings closed a
    circuit whose deployment still failed every new request."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    streams = [breaker.allow() for _ in range(5)]
    assert all(p is not None for p in streams)
    fail(breaker, POLICY.consecutive_failures)
    clock.advance(POLICY.cool_down_s)
    probe = breaker.allow()
    assert probe is not None and breaker.state() == "half_open"
    for stream in streams[:3]:
        assert stream is not None
        breaker.on_abandon(stream)
        assert breaker.allow() is None  # the probe still holds the only slot
    for stream in streams[3:]:
        assert stream is not None
        breaker.on_success(stream)
        assert breaker.state() == "half_open"
    assert breaker.snapshot("d").probes_in_flight == 1
    breaker.on_success(probe)
    assert breaker.state() == "closed"


def test_a_probe_from_an_earlier_half_open_spell_counts_for_nothing_now() -> None:
    """A probe that outlives its spell (it failed slowly after another failure reopened the
    circuit) frees no slot of the next spell."""
    clock = FakeClock()
    policy = BreakerPolicy(consecutive_failures=1, cool_down_s=5.0, half_open_probes=2)
    breaker = CircuitBreaker(policy, clock)
    fail(breaker, 1)
    clock.advance(5.0)
    slow, quick = breaker.allow(), breaker.allow()
    assert slow is not None and quick is not None
    breaker.on_failure(quick)  # reopens
    clock.advance(5.0)
    first = breaker.allow()
    second = breaker.allow()
    assert first is not None and second is not None and breaker.allow() is None
    breaker.on_abandon(slow)  # the old spell's probe ends
    assert breaker.allow() is None  # no slot of this spell was freed


def test_an_opening_names_the_code_of_the_failure_that_opened_it() -> None:
    """What an operator reads during an incident: `breaker_opened` and the health snapshot say
    `upstream_auth` for a revoked key (the log said only the deployment and the hold)."""
    clock = FakeClock()
    told: list[tuple[str, BreakerState, float | None, str | None]] = []
    registry = BreakerRegistry(POLICY, clock, on_change=lambda *change: told.append(change))
    breaker = registry.get("d1")
    for _ in range(POLICY.consecutive_failures):
        permit = breaker.allow()
        assert permit is not None
        breaker.on_failure(permit, code="upstream_auth")
    assert told == [("d1", "open", POLICY.cool_down_s, "upstream_auth")]
    assert registry.snapshot().deployments[0].last_failure_code == "upstream_auth"
