"""Breaker verdicts are attributed to the principal (tenant) that sent the request.

One principal's failures open nothing while the deployment serves others in the window; an
outage failing everyone opens it; a deployment one principal uses alone opens as before; the
principal blamed for an opening is offered the half-open probe last; memory stays bounded.
The rules are pure (`breaker_rules`), the breaker runs on a manual clock.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.execution.breaker import BreakerPolicy, CircuitBreaker, Permit
from router.execution.breaker_rules import Counts, attributed, blamed, holds, opens, trips
from tests.reliability.fakes import FakeClock

POLICY = BreakerPolicy(consecutive_failures=5, error_rate=0.5, min_volume=20, window_s=10.0,
                       cool_down_s=5.0)


def _admit(breaker: CircuitBreaker, principal: str) -> Permit:
    permit = breaker.allow(principal)
    assert permit is not None, principal
    return permit


def _fail(breaker: CircuitBreaker, principal: str, times: int = 1,
          retry_after_s: float | None = None) -> None:
    for _ in range(times):
        breaker.on_failure(_admit(breaker, principal), retry_after_s)


def _succeed(breaker: CircuitBreaker, principal: str, times: int = 1) -> None:
    for _ in range(times):
        breaker.on_success(_admit(breaker, principal))


# ------------------------------------------------------------------------------ pure rules


def test_one_principals_run_opens_nothing_while_another_was_served() -> None:
    """Five failures in a row, all A's, after B was served in the window: not enough."""
    total = Counts(run=5, requests=6, failures=5)
    assert trips(POLICY, total)
    assert not opens(POLICY, total, [Counts(run=5, requests=5, failures=5),
                                     Counts(run=0, requests=1, failures=0)])


def test_one_principals_error_rate_opens_nothing_while_another_is_served() -> None:
    """A fails 30 of 30, B is served 20 of 20: 60% over the window, all of it A's."""
    total = Counts(run=1, requests=50, failures=30)
    assert trips(POLICY, total)
    assert not opens(POLICY, total, [Counts(run=1, requests=30, failures=30),
                                     Counts(run=0, requests=20, failures=0)])


def test_a_single_failure_of_another_does_not_let_one_principals_failures_open() -> None:
    """B's one failure among its successes (a blip) is no outage: A's failures still stand
    alone (the rules must hold without them)."""
    total = Counts(run=9, requests=30, failures=9)
    assert not opens(POLICY, total, [Counts(run=8, requests=8, failures=8),
                                     Counts(run=1, requests=22, failures=1)])


def test_an_outage_failing_everyone_opens() -> None:
    """A and B both fail five in a row: without either one's, the other's still trip."""
    total = Counts(run=10, requests=12, failures=10)
    assert opens(POLICY, total, [Counts(run=5, requests=6, failures=5),
                                 Counts(run=5, requests=6, failures=5)])


def test_one_principals_failures_open_when_no_one_else_was_served() -> None:
    """Nobody else served in the window (a deployment one tenant uses): as before."""
    assert opens(POLICY, Counts(run=5, requests=5, failures=5),
                 [Counts(run=5, requests=5, failures=5)])
    assert opens(POLICY, Counts(run=6, requests=6, failures=6),
                 [Counts(run=5, requests=5, failures=5), Counts(run=1, requests=1, failures=1)])


def test_failures_of_untracked_principals_count_as_everyones() -> None:
    """Verdicts of principals no longer tracked are in the total only: they are never set
    aside, so an outage among many tenants still opens."""
    assert opens(POLICY, Counts(run=5, requests=8, failures=5), [])


counts = st.builds(lambda run, ok, failed: Counts(run=min(run, failed), requests=ok + failed,
                                                  failures=failed),
                   st.integers(0, 30), st.integers(0, 30), st.integers(0, 30))


@given(own=counts)
def test_with_one_principal_the_rules_are_the_policys(own: Counts) -> None:
    """A deployment one principal uses opens exactly when the policy's rules say so."""
    assert opens(POLICY, own, [own]) == trips(POLICY, own)


@given(attacker=counts, others=counts)
def test_a_principal_adds_nothing_to_others_who_are_served(attacker: Counts,
                                                           others: Counts) -> None:
    """Whatever one principal's counts, while others were served in the window the circuit
    opens only if the others' own counts would open it (as if it had sent nothing)."""
    total = Counts(attacker.run + others.run, attacker.requests + others.requests,
                   attacker.failures + others.failures)
    if others.served > 0 and opens(POLICY, total, [attacker, others]):
        assert trips(POLICY, others)


def test_a_retry_after_holds_only_on_throttling_that_is_not_one_principals() -> None:
    """Two 429s in a row from A while B is served hold nothing; from A and B they do."""
    policy = BreakerPolicy(holds_after=2)
    assert not holds(policy, Counts(2, 3, 2), [Counts(2, 2, 2), Counts(0, 1, 0)])
    assert holds(policy, Counts(4, 6, 4), [Counts(2, 3, 2), Counts(2, 3, 2)])
    assert attributed(lambda c: True, Counts(), [])


def test_the_principal_with_most_failures_is_blamed() -> None:
    assert blamed({"a": Counts(5, 5, 5), "b": Counts(1, 9, 1)}) == "a"
    assert blamed({"a": Counts(0, 5, 0)}) is None


# ------------------------------------------------------------------------------ the breaker


def test_one_tenants_failures_leave_the_deployment_to_a_served_tenant() -> None:
    """B served, then A fails 30 times in a row (and at 100% over the window): the circuit
    stays closed and B is still admitted."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    _succeed(breaker, "team-b")
    _fail(breaker, "team-a", 30)
    assert breaker.state() == "closed"
    assert breaker.allow("team-b") is not None


def test_one_tenants_failures_open_once_no_one_else_was_served_in_the_window() -> None:
    """B's success ages out of the window: A's failures stand alone and open it, as the
    failures of a deployment's only user do."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    _succeed(breaker, "team-b")
    _fail(breaker, "team-a", 4)
    clock.advance(POLICY.window_s + 1)
    _fail(breaker, "team-a")
    assert breaker.state() == "open"


def test_a_single_tenant_deployment_opens_after_five_failures_as_before() -> None:
    breaker = CircuitBreaker(POLICY, FakeClock())
    _succeed(breaker, "solo", 10)
    _fail(breaker, "solo", 4)
    assert breaker.state() == "closed"
    _fail(breaker, "solo")
    assert breaker.state() == "open"


def test_an_outage_failing_two_tenants_opens_on_both_their_failures() -> None:
    """Both served, then every request fails: open once each tenant's failures would trip it
    without the other's (ten alternating failures at the most)."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    _succeed(breaker, "team-a")
    _succeed(breaker, "team-b")
    for number in range(10):
        _fail(breaker, ("team-a", "team-b")[number % 2])
    assert breaker.state() == "open"


def test_a_tenants_retry_after_does_not_hold_the_deployment_open_for_others() -> None:
    """A's throttled answers (a quota its huge prompts hit) while B is served: no hold."""
    breaker = CircuitBreaker(POLICY, FakeClock())
    _succeed(breaker, "team-b")
    _fail(breaker, "team-a", 3, retry_after_s=30.0)
    assert breaker.state() == "closed"


def test_the_half_open_probe_goes_first_to_a_tenant_the_opening_refused() -> None:
    """A opened the circuit alone, B was refused meanwhile: in half-open A gets no probe (its
    poison would fail it and reopen the circuit at no cost to A), B's request takes it and its
    success closes the circuit. After a cool-down of half-open, A may probe again."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    _fail(breaker, "team-a", 5)
    assert breaker.state() == "open"
    assert breaker.allow("team-b") is None
    clock.advance(POLICY.cool_down_s)
    assert breaker.state() == "half_open"
    assert breaker.allow("team-a") is None
    probe = breaker.allow("team-b")
    assert probe is not None and probe.probe_of is not None
    breaker.on_success(probe)
    assert breaker.state() == "closed"

    _fail(breaker, "team-a", 5)  # B's success has been cleared with the window: alone again
    assert breaker.allow("team-b") is None
    clock.advance(POLICY.cool_down_s)
    assert breaker.allow("team-a") is None
    clock.advance(POLICY.cool_down_s)  # no one else came for it: A probes
    assert breaker.allow("team-a") is not None


def test_the_only_tenant_probes_as_soon_as_the_cool_down_ends() -> None:
    """No one else was refused: the tenant whose failures opened the circuit probes at once."""
    clock = FakeClock()
    breaker = CircuitBreaker(POLICY, clock)
    _fail(breaker, "solo", 5)
    assert breaker.allow("solo") is None
    clock.advance(POLICY.cool_down_s)
    probe = breaker.allow("solo")
    assert probe is not None
    breaker.on_success(probe)
    assert breaker.state() == "closed"


def test_principals_tracked_are_bounded() -> None:
    """A thousand tenants, one request each: the breaker keeps `max_principals` of them."""
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerPolicy(max_principals=8), clock)
    for number in range(1000):
        _succeed(breaker, f"tenant-{number}")
    _fail(breaker, "tenant-x")
    assert len(dict(breaker._principals.counts(clock()))) == 8
