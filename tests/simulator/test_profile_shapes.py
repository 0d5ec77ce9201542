"""Latency shapes: quantile tables drawn by inverse CDF, and the built-in profiles against the
measured requests they were fitted to (those tests read /work/shared/data/latency, the data
folder `fit_profiles` reads, and are skipped where it is absent)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy import stats

from router.providers.simulator import presets, quantile_table, sampling
from router.providers.simulator.fit_shapes import ks_distance, table_distance
from router.providers.simulator.hashrng import HashRandom
from router.providers.simulator.profile import ModelProfile, fields_to_restore

DRAWS = 20_000
TABLE = ((0.0, 10.0), (0.5, 40.0), (0.9, 50.0), (0.99, 200.0), (1.0, 400.0))


def test_a_table_is_interpolated_in_log_space_between_its_points() -> None:
    """Halfway between (0, 10) and (0.5, 40) in probability is the geometric mean, 20."""
    assert quantile_table.quantile(TABLE, 0.25) == pytest.approx(20.0)
    assert [quantile_table.quantile(TABLE, p) for p, _ in TABLE] == [v for _, v in TABLE]


def test_table_draws_reproduce_its_quantiles_and_stay_in_its_range() -> None:
    """Inverse-CDF draws have the table's p50/p90/p99 and never leave [min, max]."""
    profile = presets.instant({"ttft_quantiles_ms": TABLE, "tpot_quantiles_ms": TABLE})
    rng = random.Random(4)
    ttft = [sampling.draw_base_ttft_ms(profile, rng) for _ in range(DRAWS)]
    tpot = [sampling.draw_tpot_ms(profile, rng) for _ in range(DRAWS)]
    for draws in (ttft, tpot):
        assert np.percentile(draws, [50, 90, 99]) == pytest.approx([40, 50, 200], rel=0.05)
        assert min(draws) >= 10.0 and max(draws) <= 400.0


@given(st.lists(st.floats(0.01, 2.0), min_size=1, max_size=30), st.floats(0.0, 1.0))
def test_the_table_cdf_inverts_its_quantile_function(log_steps: list[float], u: float) -> None:
    """cdf(quantile(u)) = u wherever the table is strictly increasing (steps of 1 % or more:
    closer values leave the interpolation nothing to resolve in floating point)."""
    ordered = list(np.exp(np.cumsum([0.0, *log_steps])))
    table = tuple((i / (len(ordered) - 1), float(v)) for i, v in enumerate(ordered))
    assert quantile_table.cdf(table, quantile_table.quantile(table, u)) == pytest.approx(
        u, abs=1e-9)


def test_a_flat_run_of_a_table_is_an_atom() -> None:
    """Equal values for a range of probabilities: that value is drawn with that probability."""
    table = ((0.0, 5.0), (0.2, 8.0), (0.6, 8.0), (1.0, 9.0))
    assert quantile_table.quantile(table, 0.4) == 8.0
    assert quantile_table.cdf_below(table, 8.0) == pytest.approx(0.2)
    assert quantile_table.cdf(table, 8.0) == pytest.approx(0.6)


def test_exact_ks_distance_agrees_with_scipy_for_a_continuous_cdf() -> None:
    """The fitter's KS distance is scipy's one-sample statistic."""
    sample = [random.Random(9).lognormvariate(3.0, 0.5) for _ in range(57)]
    model = stats.lognorm(s=0.6, scale=20.0)
    assert ks_distance(sample, model.cdf) == pytest.approx(stats.kstest(sample, model.cdf)
                                                           .statistic)


@pytest.mark.parametrize("table", [
    ((0.0, 1.0),),
    ((0.1, 1.0), (1.0, 2.0)),
    ((0.0, 1.0), (0.9, 2.0)),
    ((0.0, 1.0), (0.5, 3.0), (0.5, 4.0), (1.0, 5.0)),
    ((0.0, 0.0), (1.0, 5.0)),
    ((0.0, 3.0), (0.5, 2.0), (1.0, 5.0)),
])
def test_a_malformed_table_is_refused(table: tuple[tuple[float, float], ...]) -> None:
    """One point, not from 0 to 1, repeated probabilities, a zero or a decreasing value."""
    with pytest.raises(ValidationError, match="quantile table"):
        ModelProfile(ttft_quantiles_ms=table)


def test_a_profile_without_a_table_draws_exactly_as_the_lognormal_fields_say() -> None:
    """Profiles of p50/p99 fields only (users' own) take the same draws as before tables."""
    profile = presets.steady(100, 5, changes={"ttft_p99_ms": 300, "tpot_p99_ms": 9,
                                              "ttft_tail_share": 0.1, "ttft_tail_p50_ms": 900,
                                              "ttft_tail_max_ms": 2000})
    ours, reference = random.Random(11), random.Random(11)
    for _ in range(200):
        tail = reference.random() < 0.1
        expected = (min(sampling.draw_quantiles(reference, 900, 2000), 2000) if tail
                    else sampling.draw_quantiles(reference, 100, 300))
        assert sampling.draw_base_ttft_ms(profile, ours) == expected
        assert sampling.draw_tpot_ms(profile, ours) == sampling.draw_quantiles(reference, 5, 9)


def test_the_same_key_gives_the_same_table_draws() -> None:
    """Seeded determinism holds for table profiles."""
    profile = presets.builtin("sim-large")
    first = [sampling.draw_tpot_ms(profile, HashRandom(b"k")) for _ in range(3)]
    rng_a, rng_b = random.Random(5), random.Random(5)
    assert len(set(first)) == 1
    assert [sampling.draw_base_ttft_ms(profile, rng_a) for _ in range(50)] == [
        sampling.draw_base_ttft_ms(profile, rng_b) for _ in range(50)]


def test_moving_the_lognormal_fields_drops_their_table_and_only_theirs() -> None:
    """bench.soak's 'slow' fault sets sim-large's TTFT p50/p99: the table must not hide it."""
    large = presets.builtin("sim-large")
    assert large.ttft_quantiles_ms is not None and large.tpot_quantiles_ms is not None
    slow = large.patched({"ttft_p50_ms": 5000, "ttft_p99_ms": 9000})
    assert slow.ttft_quantiles_ms is None and slow.tpot_quantiles_ms == large.tpot_quantiles_ms
    rng = random.Random(6)
    assert np.median([sampling.draw_base_ttft_ms(slow, rng) for _ in range(2000)]) == (
        pytest.approx(5000, rel=0.05))
    assert large.patched({"tpot_p50_ms": 30}).tpot_quantiles_ms is None
    # unrelated changes, an unchanged value, or a table given with the change keep the tables
    assert large.patched({"prefill_ms_per_token": 1.0}).ttft_quantiles_ms is not None
    assert large.patched({"ttft_p50_ms": large.ttft_p50_ms}).ttft_quantiles_ms is not None
    assert large.patched({"ttft_p50_ms": 10, "ttft_p99_ms": 20, "ttft_quantiles_ms": TABLE}
                         ).ttft_quantiles_ms == TABLE


def test_the_fields_to_restore_undo_a_change_that_dropped_a_table() -> None:
    """bench.soak restores a fault's fields from the model's JSON: the table comes back too."""
    large = presets.builtin("sim-large")
    changes = {"ttft_p50_ms": 5000, "ttft_p99_ms": 9000}
    original = fields_to_restore(large.model_dump(mode="json"), changes)
    assert set(original) == {"ttft_p50_ms", "ttft_p99_ms", "ttft_quantiles_ms"}
    assert large.patched(changes).patched(original) == large
    assert fields_to_restore(large.model_dump(mode="json"), {"cut_rate": 0.3}) == {
        "cut_rate": 0.0}


def test_every_builtin_profile_carries_tables_and_their_ks_distances() -> None:
    """Each demo model draws from measured shapes and says how close they are."""
    for name in presets.builtin_names():
        profile = presets.builtin(name)
        assert profile.ttft_quantiles_ms is not None and profile.tpot_quantiles_ms is not None
        assert {"ttft_ks", "tpot_ks"} <= set(profile.sources), name


DATA = Path("/work/shared/data/latency")
needs_data = pytest.mark.skipif(not DATA.exists(),
                                reason="the measured latency data is not on this machine")
QUANTILES = (0.10, 0.50, 0.90, 0.95, 0.99)


def measured(name: str) -> tuple[list[float], list[float], float]:
    """TTFT and TPOT of the requests a demo model was fitted to, and their prompt tokens."""
    from router.providers.simulator import fit_profiles

    rows = fit_profiles.read_jsonl(DATA / "provider_latency.jsonl")
    spec = next(s for s in fit_profiles.demo_specs(rows) if s.name == name)
    line = fit_profiles.select(rows, spec.selector)
    requests = fit_profiles.read_jsonl(DATA / fit_profiles.REQUEST_FILES[str(line["source"])])
    found = fit_profiles.request_rows(requests, line)
    return ([cast(float, r["ttft_ms"]) for r in found],
            [cast(float, r["tpot_ms"]) for r in found if r["tpot_ms"] is not None],
            fit_profiles.measured_prompt_tokens(line))


def share_at_or_below(draws: Sequence[float], data: Sequence[float], q: float) -> float:
    return float(np.mean(np.asarray(draws) <= np.percentile(data, 100 * q)))


@needs_data
@pytest.mark.parametrize("name", presets.builtin_names())
def test_builtin_profiles_draw_the_shape_of_their_measured_requests(name: str) -> None:
    """What the simulator draws (at the measured prompt length) against the requests: KS under
    0.1 (the data README: ~0.1 good, ~0.2 poor; one lognormal through p50/p99 was up to 0.43),
    and at the data's p10/p50/p90/p95/p99 the draws' share below is that quantile's."""
    profile = presets.builtin(name)
    ttft_data, tpot_data, prompt = measured(name)
    rng = random.Random(12)
    ttft = [sampling.ttft_ms(sampling.draw_base_ttft_ms(profile, rng), profile, round(prompt),
                             prefix_hit=False) for _ in range(DRAWS)]
    tpot = [sampling.draw_tpot_ms(profile, rng) for _ in range(DRAWS)]
    for kind, draws, data in (("ttft", ttft, ttft_data), ("tpot", tpot, tpot_data)):
        assert stats.ks_2samp(draws, data).statistic < 0.1, kind
        for q in QUANTILES:
            assert share_at_or_below(draws, data, q) == pytest.approx(q, abs=0.02), (kind, q)


@needs_data
@pytest.mark.parametrize("name", presets.builtin_names())
def test_the_recorded_ks_distances_are_those_of_the_committed_tables(name: str) -> None:
    """`sources` states the KS distance of the tables the file holds (exactly, to 3 places)."""
    profile = presets.builtin(name)
    ttft_data, tpot_data, prompt = measured(name)
    base = [t - profile.prefill_ms_per_token * prompt for t in ttft_data]
    assert profile.ttft_quantiles_ms is not None and profile.tpot_quantiles_ms is not None
    for key, data, table in (("ttft_ks", base, profile.ttft_quantiles_ms),
                             ("tpot_ks", tpot_data, profile.tpot_quantiles_ms)):
        distance = table_distance(data, table)
        assert distance < 0.06
        assert profile.sources[key].startswith(f"KS distance {distance:.3f} "), key
