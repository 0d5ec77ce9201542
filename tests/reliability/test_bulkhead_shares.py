"""A deployment's `max_in_flight` shared fairly among tenants (`router/execution/bulkhead.py`):
the rule as a pure function, and the places and asks `FairShares` keeps for it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.execution.bulkhead import ACTIVE_S, FairShares, admits, headroom


def test_a_tenant_alone_has_the_whole_cap() -> None:
    assert all(admits(8, load, load, 1) for load in range(8))
    assert not admits(8, 8, 8, 1)


def test_the_last_places_go_to_tenants_under_their_share() -> None:
    """A cap of 8 beside another tenant: 6 places for anyone, the last 2 (a quarter) for a
    tenant holding under 4 (an equal share of 8 between two)."""
    assert headroom(8) == 2
    assert admits(8, 5, 5, 2)  # under the headroom: anyone
    assert not admits(8, 6, 6, 2)  # the flooding tenant, past its share, at the headroom
    assert admits(8, 6, 0, 2) and admits(8, 7, 1, 2)  # the other takes the last two
    assert not admits(8, 8, 2, 2)  # full is full


@given(cap=st.integers(1, 64), load=st.integers(0, 80), held=st.integers(0, 80),
       active=st.integers(1, 20))
def test_never_past_the_cap_and_never_idle_under_the_headroom(
        cap: int, load: int, held: int, active: int) -> None:
    held = min(held, load)
    allowed = admits(cap, load, held, active)
    if load >= cap:
        assert not allowed
    elif load < cap - headroom(cap) or active == 1 or held * active < cap:
        assert allowed


def _fill(shares: FairShares, load: list[int], tenant: str, cap: int, now: float) -> int:
    """`tenant` asks for places on `d` until refused; how many it took."""
    taken = 0
    while shares.admits("d", tenant, cap, load[0], now):
        shares.begin("d", tenant)
        load[0] += 1
        taken += 1
    return taken


def test_a_flood_leaves_the_headroom_to_the_tenant_that_asks_next() -> None:
    """Before 2026-12-07 the flood took all 8 places and the other tenant's every request to
    the deployment was refused (`deployment_saturated`): quiet tenants served 4-11% during a
    flood (the overload audit)."""
    shares, load = FairShares(), [0]
    assert _fill(shares, load, "flood", 8, now=0.0) == 8  # alone: the whole cap
    for ticket in range(1, 5):  # half its answers end
        shares.end(ticket)
        load[0] -= 1
    assert shares.admits("d", "quiet", 8, load[0], now=1.0)  # the quiet tenant asks: counted
    assert _fill(shares, load, "flood", 8, now=1.0) == 2  # the flood to 6 (the headroom)
    assert _fill(shares, load, "quiet", 8, now=1.0) == 2  # the quiet tenant the last two
    assert shares.held("d") == {"flood": 6, "quiet": 2}


def test_a_tenant_that_stopped_asking_stops_counting() -> None:
    shares, load = FairShares(), [0]
    assert shares.admits("d", "quiet", 4, 0, now=0.0)
    assert _fill(shares, load, "flood", 4, now=1.0) == 3  # the quiet tenant asked 1 s ago
    assert _fill(shares, load, "flood", 4, now=1.0 + ACTIVE_S) == 1  # now it is alone


def test_ending_a_place_twice_frees_it_once() -> None:
    shares = FairShares()
    first, second = shares.begin("d", "a"), shares.begin("d", "a")
    shares.end(first)
    shares.end(first)
    shares.end(0)  # an attempt that took no place
    assert shares.held("d") == {"a": 1}
    shares.end(second)
    assert shares.held("d") == {}


def test_what_it_keeps_does_not_grow_with_tenants_over_time() -> None:
    """Tenants that asked long ago are forgotten as others ask."""
    shares = FairShares()
    for n in range(10_000):
        shares.admits("d", f"tenant-{n}", 8, 0, now=n)
    assert len(shares._asked["d"]) <= ACTIVE_S + 1
