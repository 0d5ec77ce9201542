"""Outcome recording, feedback validation and the in-memory store."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from router.errors import NotFoundError, RequestError
from router.experiments.outcomes import (
    Feedback,
    Halt,
    MemoryOutcomeStore,
    Outcome,
    analysis_value,
    exposure_key,
    submit_feedback,
    validate_feedback,
)
from tests.experiments.support import make_spec

SPEC = make_spec(metrics=[{"name": "thumbs_up", "kind": "binary"},
                          {"name": "rating", "kind": "continuous", "range": [1, 5]}])
NOW = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("metric", "value", "match"),
    [
        ("stars", 1.0, "unknown metric 'stars'"),
        ("rating", 7.0, r"must lie in \[1, 5\]"),
        ("thumbs_up", 0.5, "must be 0 or 1"),
        ("rating", math.nan, "finite"),
    ],
)
def test_invalid_feedback_is_a_request_error(metric: str, value: float, match: str) -> None:
    """Unknown metrics and out-of-range values raise RequestError (HTTP 400) saying why."""
    with pytest.raises(RequestError, match=match) as caught:
        validate_feedback(SPEC, "req-1", metric, value)
    assert caught.value.status_code == 400


def test_valid_feedback_is_returned_as_a_float_value() -> None:
    """A declared metric with an in-range value becomes a Feedback record."""
    found = validate_feedback(SPEC, "req-1", "thumbs_up", True)
    assert found == Feedback("req-1", "thumbs_up", 1.0)


async def test_feedback_for_an_unknown_request_is_not_found() -> None:
    """Feedback for a request id the store never saw raises NotFoundError (404)."""
    store = MemoryOutcomeStore(random.Random(0))
    with pytest.raises(NotFoundError):
        await submit_feedback(store, {SPEC.name: SPEC}, "acme", "ghost", "rating", 3.0)


async def test_feedback_lands_on_the_requests_arm_once() -> None:
    """Feedback finds its arm through the request id; a second value is ignored."""
    store = MemoryOutcomeStore(random.Random(0))
    await store.record(Outcome(SPEC.name, "cheap", exposure_key("acme", "req-1"), error=False,
                               ttft_ms=100.0))
    specs = {SPEC.name: SPEC}
    exposure, recorded = await submit_feedback(store, specs, "acme", "req-1", "rating", 4.0)
    _, again = await submit_feedback(store, specs, "acme", "req-1", "rating", 1.0)
    samples = (await store.snapshot(SPEC.name)).arm("cheap").samples("rating")
    assert (exposure.arm, recorded, again) == ("cheap", True, False)
    assert (samples.count, samples.mean) == (1, 4.0)


async def test_feedback_is_taken_only_from_the_tenant_that_made_the_request() -> None:
    """Another tenant cannot find (so neither read the arm of nor pre-empt the owner's value
    on) a request, and two tenants' requests with the same id keep their own arms."""
    store = MemoryOutcomeStore(random.Random(0))
    specs = {SPEC.name: SPEC}
    await store.record(Outcome(SPEC.name, "cheap", exposure_key("acme", "req-1"), error=False))
    await store.record(Outcome(SPEC.name, "control", exposure_key("globex", "req-1"),
                               error=False))
    with pytest.raises(NotFoundError):
        await submit_feedback(store, specs, "initech", "req-1", "rating", 5.0)
    acme, acme_recorded = await submit_feedback(store, specs, "acme", "req-1", "rating", 4.0)
    globex, globex_recorded = await submit_feedback(store, specs, "globex", "req-1", "rating",
                                                    2.0)
    snapshot = await store.snapshot(SPEC.name)
    assert (acme.arm, globex.arm, acme_recorded, globex_recorded) == ("cheap", "control", True,
                                                                      True)
    assert snapshot.arm("cheap").samples("rating").mean == 4.0
    assert snapshot.arm("control").samples("rating").mean == 2.0


async def test_a_flooding_tenant_evicts_its_own_exposures_not_anothers() -> None:
    """At capacity the oldest records of the tenant that filled it go: another tenant's
    request keeps its arm (its feedback is found) and its feedback stays counted once."""
    store = MemoryOutcomeStore(random.Random(0), exposure_capacity=3)
    specs = {SPEC.name: SPEC}
    await store.record(Outcome(SPEC.name, "cheap", exposure_key("acme", "req-1"), error=False))
    _, first = await submit_feedback(store, specs, "acme", "req-1", "rating", 4.0)
    for n in range(10):  # more requests, and feedback on each, than the store holds
        await store.record(Outcome(SPEC.name, "control", exposure_key("globex", f"g-{n}"),
                                   error=False))
        await submit_feedback(store, specs, "globex", f"g-{n}", "rating", 1.0)
    exposure, again = await submit_feedback(store, specs, "acme", "req-1", "rating", 5.0)
    assert (exposure.arm, first, again) == ("cheap", True, False)
    assert await store.exposure(exposure_key("globex", "g-9")) is not None
    assert await store.exposure(exposure_key("globex", "g-0")) is None  # its own oldest went


def test_exposure_keys_of_different_tenants_never_collide() -> None:
    """Length-prefixed: no tenant and id pair spells another pair's key."""
    assert exposure_key("a:b", "c") != exposure_key("a", "b:c")
    assert exposure_key(None, "x") == exposure_key("", "x")


async def test_counts_are_exact_while_reservoir_and_window_stay_bounded() -> None:
    """Sums cover every value; the reservoir and the recent window keep their sizes."""
    store = MemoryOutcomeStore(random.Random(1), reservoir_size=50, window_size=20)
    values = [float(v) for v in range(1, 501)]
    for i, v in enumerate(values):
        await store.record(Outcome(SPEC.name, "control", f"r{i}", error=i % 10 == 0, e2e_ms=v))
    arm = (await store.snapshot(SPEC.name)).arm("control")
    e2e = arm.samples("e2e_ms")
    assert e2e.count == len(values)
    assert e2e.mean == pytest.approx(sum(math.log(v) for v in values) / len(values))
    assert len(e2e.reservoir) == 50 and set(e2e.reservoir) <= set(values)
    assert e2e.recent == tuple(values[-20:])
    assert arm.samples("error").mean == pytest.approx(0.1)


async def test_first_halt_wins() -> None:
    """Halting an already halted arm is refused and the original reason is kept."""
    store = MemoryOutcomeStore(random.Random(0))
    first = Halt("cheap", "error_rate", "first", 10, 0.3, 0.05, NOW)
    assert await store.halt(SPEC.name, first)
    assert not await store.halt(SPEC.name, Halt("cheap", "cost_per_request", "second", 11,
                                                1.0, 0.5, NOW))
    assert (await store.snapshot(SPEC.name)).halts == (first,)


def test_latencies_are_analysed_on_the_log_scale_and_others_linearly() -> None:
    """ttft/tpot/e2e go through log; cost, errors and feedback stay as they are."""
    assert analysis_value("ttft_ms", math.e) == pytest.approx(1.0)
    assert analysis_value("cost_usd", 0.25) == 0.25
    assert analysis_value("error", 1.0) == 1.0


async def test_the_capacity_bounds_every_tenant_together() -> None:
    """Each tenant had the capacity to itself, so the store's memory grew with the tenants
    (about 110 MiB each at the defaults; the memory audit): the capacity now bounds them all
    together, the tenant holding the most evicting its oldest."""
    store = MemoryOutcomeStore(random.Random(0), exposure_capacity=6)
    for tenant in ("acme", "globex", "initech"):
        for n in range(5):
            await store.record(Outcome(SPEC.name, "control", exposure_key(tenant, f"{n}"),
                                       error=False))
    kept = {tenant: [n for n in range(5)
                     if await store.exposure(exposure_key(tenant, f"{n}")) is not None]
            for tenant in ("acme", "globex", "initech")}
    assert sum(len(ids) for ids in kept.values()) == 6
    assert all(len(ids) == 2 and ids == [3, 4] for ids in kept.values()), kept
