"""Laws of the decayed quantile sketch: relative error, decay, merging."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.stats import Decay, DecayedSketch, Quantiles
from router.stats.quantiles import LEVELS

T0 = 1_700_000_000.0
latencies = st.lists(st.floats(min_value=1e-3, max_value=100.0), min_size=1, max_size=300)
quantile_levels = st.sampled_from((0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0))


def _sketch(values: list[float], t: float = T0, alpha: float = 0.01) -> DecayedSketch:
    sketch = DecayedSketch(Decay(5.0), alpha)
    for v in values:
        sketch.add(v, t)
    return sketch


@given(values=latencies, q=quantile_levels)
@settings(max_examples=100, deadline=None)
def test_quantile_within_relative_accuracy_of_numpy(values: list[float], q: float) -> None:
    """Without decay, the q-quantile is within alpha of numpy's inverted-CDF quantile."""
    sketch = _sketch(values)
    found = sketch.quantile(q)
    assert found is not None
    exact = float(np.quantile(np.asarray(values), q, method="inverted_cdf"))
    assert abs(found - exact) <= sketch.alpha * exact * (1 + 1e-9)


@given(values=latencies, half_lives=st.floats(min_value=0.1, max_value=20.0))
@settings(max_examples=100, deadline=None)
def test_weight_halves_after_each_half_life(values: list[float], half_lives: float) -> None:
    """count(t + k * half_life) == count(t) / 2**k."""
    sketch = _sketch(values)
    later = T0 + half_lives * 5.0
    assert np.isclose(sketch.count(later), len(values) / 2.0 ** half_lives, rtol=1e-6)


@given(old=latencies, new=latencies)
@settings(max_examples=100, deadline=None)
def test_recent_values_dominate_after_several_half_lives(old: list[float],
                                                         new: list[float]) -> None:
    """Values added 10 half-lives later weigh 1024x as much as the old ones."""
    sketch = _sketch(old)
    for v in new:
        sketch.add(v * 1000.0, T0 + 50.0)
    found = sketch.quantiles((0.5,))
    assert found is not None
    assert found[0] >= min(new) * 1000.0 * (1 - sketch.alpha)


@given(a=latencies, b=latencies, c=latencies,
       ta=st.floats(0, 30), tb=st.floats(0, 30), tc=st.floats(0, 30))
@settings(max_examples=50, deadline=None)
def test_merge_is_associative(a: list[float], b: list[float], c: list[float],
                              ta: float, tb: float, tc: float) -> None:
    """(a+b)+c and a+(b+c) give the same counts and quantiles, whatever the landmarks."""
    sa, sb, sc = _sketch(a, T0 + ta), _sketch(b, T0 + tb), _sketch(c, T0 + tc)
    left = sa.copy()
    left.merge(sb)
    left.merge(sc)
    right_tail = sb.copy()
    right_tail.merge(sc)
    right = sa.copy()
    right.merge(right_tail)
    now = T0 + 40.0
    assert np.isclose(left.count(now), right.count(now), rtol=1e-9)
    levels = (0.1, 0.5, 0.9, 0.99)
    assert left.quantiles(levels) == right.quantiles(levels)


@given(a=latencies, b=latencies)
@settings(max_examples=50, deadline=None)
def test_merge_equals_adding_everything_to_one_sketch(a: list[float], b: list[float]) -> None:
    """Merging two sketches equals one sketch that saw both streams."""
    merged = _sketch(a)
    merged.merge(_sketch(b, T0 + 3.0))
    single = _sketch(a)
    for v in b:
        single.add(v, T0 + 3.0)
    assert merged.quantiles((0.5, 0.95)) == single.quantiles((0.5, 0.95))
    assert np.isclose(merged.count(T0 + 3.0), single.count(T0 + 3.0))


def test_landmark_rebase_keeps_counts_and_quantiles() -> None:
    """After hundreds of half-lives the landmark moves and nothing observable changes."""
    sketch = _sketch([0.1, 0.2, 0.3])
    late = T0 + 5.0 * 500
    for v in (1.0, 2.0, 3.0):
        sketch.add(v, late)
    assert np.isclose(sketch.count(late), 3.0, rtol=1e-6)
    assert sketch.quantile(0.5) is not None and 1.9 < (sketch.quantile(0.5) or 0) < 2.1


def test_cdf_counts_share_below_value() -> None:
    """cdf(x) is the share of weight at or below x (within a bucket's width)."""
    sketch = _sketch([0.1] * 90 + [2.0] * 10)
    assert np.isclose(sketch.cdf(1.0) or 0.0, 0.9)


def test_state_round_trip_preserves_sketch() -> None:
    """to_state/from_state gives back the same quantiles and count."""
    sketch = _sketch([0.1, 0.5, 0.7, 3.0])
    back = DecayedSketch.from_state(Decay(5.0), sketch.to_state(), sketch.alpha)
    assert back.quantiles((0.5, 0.99)) == sketch.quantiles((0.5, 0.99))
    assert back.count(T0 + 1) == sketch.count(T0 + 1)


def _linear_scan_quantiles(sketch: DecayedSketch, qs: tuple[float, ...]) -> tuple[float, ...]:
    """The quantile walk as first written (one entry per bucket, values for every bucket)."""
    gamma = (1.0 + sketch.alpha) / (1.0 - sketch.alpha)
    zero_w, total = sketch._zero, sketch._total
    entries = [(0.0, zero_w)] if zero_w > 0.0 else []
    entries.extend((2.0 * gamma ** k / (gamma + 1.0), sketch.bins()[k])
                   for k in sorted(sketch.bins()))
    last, out, cum, pos = len(entries) - 1, [], 0.0, 0
    for q in qs:
        target = q * total * (1.0 - 1e-12)
        while pos < last and cum + entries[pos][1] < target:
            cum += entries[pos][1]
            pos += 1
        out.append(entries[pos][0])
    return tuple(out)


@given(values=st.lists(st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=100.0)),
                       min_size=1, max_size=300),
       weights=st.lists(st.floats(min_value=0.01, max_value=5.0), min_size=1, max_size=300))
@settings(max_examples=200, deadline=None)
def test_quantiles_equal_the_linear_scan(values: list[float], weights: list[float]) -> None:
    """The binary search over cumulative weights answers exactly what a linear walk does."""
    sketch = DecayedSketch(Decay(5.0), 0.01)
    for v, w in zip(values, weights * (len(values) // len(weights) + 1), strict=False):
        sketch.add(v, T0, w)
    qs = (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0)
    assert sketch.quantiles(qs) == _linear_scan_quantiles(sketch, qs)


@pytest.mark.parametrize("values", [(0.0, 0.0, 0.01, 2.0), (1e-12, 0.3, 0.3, 0.9),
                                    (0.02, 0.05, 0.07, 0.4), (5.0, 5.0, 5.0, 5.0)])
def test_quantiles_from_a_sketch_equal_the_general_constructor(values: tuple[float, ...]) -> None:
    """`Quantiles.of_sketch` (one call, for refreshes) builds what `Quantiles.of` builds from the
    ascending values a sketch answers, logs included (clamped at the floor for zeros)."""
    fast, general = Quantiles.of_sketch(values), Quantiles.of(values)
    assert fast == general and fast is not None and fast.logs == general.logs
    assert Quantiles.of_sketch(None) is None


def test_a_sketch_answers_ascending_values_at_the_summary_levels() -> None:
    """What `of_sketch` relies on: a sketch's values at ascending levels never decrease."""
    rng = random.Random(3)
    sketch = DecayedSketch(Decay(30.0))
    for i in range(500):
        sketch.add(0.0 if rng.random() < 0.6 else rng.lognormvariate(-2, 1.5), float(i) * 0.01)
    found = sketch.quantiles(LEVELS)
    assert found is not None and list(found) == sorted(found) and found[0] == 0.0 < found[-1]
