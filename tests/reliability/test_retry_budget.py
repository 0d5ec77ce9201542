"""Retry budget: extra attempts stay within share x requests + floor x time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.execution.retry_budget import Budget, BudgetPolicy, retry_budget
from tests.reliability.fakes import FakeClock

# One step of traffic: wait this long, then this many requests and this many retry attempts.
steps = st.lists(
    st.tuples(st.floats(0, 3), st.integers(0, 20), st.integers(0, 10)), max_size=60
)
budget_policies = st.builds(
    BudgetPolicy,
    share=st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.5]),
    floor_per_s=st.sampled_from([0.0, 0.1, 1.0, 5.0]),
    window_s=st.sampled_from([1.0, 5.0, 10.0]),
    slots=st.sampled_from([1, 5, 10]),
)


@settings(max_examples=200)
@given(policy=budget_policies, traffic=steps)
def test_total_retries_bounded_by_share_and_floor(
    policy: BudgetPolicy, traffic: list[tuple[float, int, int]]
) -> None:
    """Over any run, retries granted <= share x requests + floor x (elapsed + one window)."""
    clock = FakeClock(start=1000.37)  # not aligned with any bucket boundary
    budget = Budget(policy, clock)
    requests = granted = 0
    elapsed = 0.0
    for wait, new_requests, attempts in traffic:
        clock.advance(wait)
        elapsed += wait
        for _ in range(new_requests):
            budget.record_request()
        requests += new_requests
        granted += sum(budget.try_spend() for _ in range(attempts))
    bound = policy.share * requests + policy.floor_per_s * (elapsed + policy.window_s)
    assert granted <= bound + 1e-6


@settings(max_examples=200)
@given(policy=budget_policies, traffic=steps)
def test_window_never_holds_more_retries_than_it_earned(
    policy: BudgetPolicy, traffic: list[tuple[float, int, int]]
) -> None:
    """Whenever a retry is granted, the window's spent tokens (it included) stay within
    share x the window's requests + the window's reserve."""
    clock = FakeClock()
    budget = Budget(policy, clock)
    reserve = policy.floor_per_s * policy.window_s
    for wait, new_requests, attempts in traffic:
        clock.advance(wait)
        for _ in range(new_requests):
            budget.record_request()
        for _ in range(attempts):
            if budget.try_spend():
                view = budget.snapshot()
                assert view.spent <= policy.share * view.requests + reserve + 1e-6


def test_ten_percent_share_allows_one_retry_per_ten_requests() -> None:
    """With no floor, 100 requests buy exactly 10 retries."""
    budget = Budget(BudgetPolicy(share=0.1, floor_per_s=0.0, window_s=10.0), FakeClock())
    for _ in range(100):
        budget.record_request()
    granted = sum(budget.try_spend() for _ in range(50))
    assert granted == 10


def test_floor_lets_a_quiet_service_retry() -> None:
    """With no requests at all, the floor still allows floor x window retries."""
    policy = BudgetPolicy(share=0.1, floor_per_s=1.0, window_s=10.0)
    budget = Budget(policy, FakeClock())
    granted = sum(budget.try_spend() for _ in range(100))
    assert granted == int(policy.floor_per_s * policy.window_s)


def test_deposits_expire_after_the_window() -> None:
    """Credit from old requests is gone once the window has passed."""
    clock = FakeClock()
    policy = BudgetPolicy(share=1.0, floor_per_s=0.0, window_s=10.0)
    budget = Budget(policy, clock)
    for _ in range(5):
        budget.record_request()
    clock.advance(policy.window_s + 1.0)
    assert not budget.try_spend()
    assert budget.snapshot().requests == 0


def test_spent_tokens_come_back_after_the_window() -> None:
    """Once the window passes, the reserve is available again."""
    clock = FakeClock()
    budget = retry_budget(clock, BudgetPolicy(share=0.0, floor_per_s=0.2, window_s=10.0))
    assert sum(budget.try_spend() for _ in range(5)) == 2
    clock.advance(10.0)
    assert budget.try_spend()
