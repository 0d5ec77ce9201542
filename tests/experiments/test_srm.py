"""The sample-ratio-mismatch check: the pure test, the unit counts behind it, the report."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import numpy as np
from scipy.stats import chisquare

from policies.experiments import UnitIds
from router.experimentation import Experiments
from router.experiments.monitor import report_from_store
from router.experiments.outcomes import Halt, MemoryOutcomeStore
from router.experiments.report import render_table
from router.experiments.srm import sample_ratio_check
from tests.experiments.support import make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)
SHARES = {"control": 0.6, "a": 0.3, "b": 0.1}


def test_the_statistic_is_pearsons_chi_square_against_the_shares() -> None:
    """Same statistic and p-value as scipy's goodness-of-fit test with expected = shares."""
    units = {"control": 6100, "a": 2950, "b": 950}
    check = sample_ratio_check(units, SHARES)
    reference = chisquare([6100, 2950, 950], [6000, 3000, 1000])
    assert np.isclose(check.chi_square, reference.statistic)
    assert np.isclose(check.p_value, reference.pvalue)
    assert check.degrees_of_freedom == 2 and check.ready and not check.mismatch


def test_a_drift_from_the_shares_is_flagged() -> None:
    """50/50 configured, 5,000 against 5,400 units: p < 0.001, a mismatch."""
    check = sample_ratio_check({"control": 5000, "b": 5400}, {"control": 0.5, "b": 0.5})
    assert check.p_value < 0.001 and check.mismatch


def test_counts_drawn_at_the_shares_are_rarely_flagged() -> None:
    """2,000 seeded multinomial draws of 20,000 units at the shares: about 0.1% flagged."""
    rng = np.random.default_rng(21)
    draws = rng.multinomial(20_000, list(SHARES.values()), size=2000)
    flagged = sum(sample_ratio_check(dict(zip(SHARES, row.tolist(), strict=True)),
                                     SHARES).mismatch for row in draws)
    assert flagged <= 8  # expected 2


def test_too_few_units_are_not_checked() -> None:
    """Below 5 expected units in an arm the chi-square approximation fails: no verdict."""
    check = sample_ratio_check({"control": 30, "a": 0}, SHARES)
    assert not check.ready and not check.mismatch and check.p_value == 1.0
    assert check.units == {"control": 30, "a": 0, "b": 0}


async def test_a_unit_is_counted_once_on_its_hashed_arm_even_after_a_halt() -> None:
    """Each user is counted once, on the arm it hashes to; after that arm is halted its users
    are served by control but still counted on their hashed arm, so the check stays quiet
    (counting the serving arm would make every halt a mismatch)."""
    spec = make_spec(arms=[{"name": "control", "route": "policy:chat", "control": True,
                            "share": 0.5},
                           {"name": "cheap", "route": "model:small", "share": 0.5}])
    store = MemoryOutcomeStore(random.Random(0))
    trials = Experiments([spec], store, clock=lambda: NOW)
    hashed: dict[str, str] = {}
    for round_ in range(3):
        if round_ == 2:
            await store.halt(spec.name, Halt("cheap", "error_rate", "x", 1, 1.0, 0.05, NOW))
            await trials.check_guardrails()
        for i in range(400):
            got = trials.assign("chat", UnitIds(request=f"r{round_}-{i}", tenant=None,
                                                user=f"u{i}", session=None))
            assert got is not None
            hashed.setdefault(f"u{i}", got.assigned_arm)
            if round_ == 2:
                assert got.arm == "control"
        await asyncio.sleep(0)  # the counting writes run on the loop
    report = await report_from_store(spec, store, now=NOW, rng=np.random.default_rng(0),
                                     resamples=50)
    assert report.srm is not None
    expected = {arm: sum(a == arm for a in hashed.values()) for arm in ("control", "cheap")}
    assert report.srm.units == expected and sum(expected.values()) == 400
    assert report.srm.ready and not report.srm.mismatch
    assert "sample ratio: units control" in render_table(report)


async def test_assignment_and_exposure_from_a_worker_thread_are_recorded() -> None:
    """The pipeline prepares very long prompts in a worker thread, assignment and exposure
    included: their store writes are handed to the loop (they raised RuntimeError, no running
    event loop, failing every such request of an experiment)."""
    spec = make_spec(unit="request")
    store = MemoryOutcomeStore(random.Random(0))
    trials = Experiments([spec], store, clock=lambda: NOW)
    trials.assign("chat", UnitIds(request="warm", tenant=None, user=None, session=None))
    units = UnitIds(request="long", tenant=None, user=None, session=None)

    def prepare() -> None:
        assignment = trials.assign("chat", units)
        assert assignment is not None
        trials.expose(assignment, units)

    await asyncio.to_thread(prepare)
    for _ in range(5):
        await asyncio.sleep(0)
    assert sum((await store.snapshot(spec.name)).assigned.values()) == 2
    assert await store.exposure("0::long") is not None
