"""The risk combination: signals set a floor, a hint replaces the model's opinion above it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.labels import RISK_ORDER, RISKS, SIGNALS, Risk, Signal
from router.classify.risk import combine_risk, risk_floor

TABLE: list[tuple[Risk, frozenset[Signal], Risk | None, Risk]] = [
    # model, signals, hint, expected
    ("low", frozenset(), None, "low"),
    ("medium", frozenset(), None, "medium"),
    ("high", frozenset(), None, "high"),
    ("low", frozenset({"pii"}), None, "high"),
    ("low", frozenset({"jailbreak"}), None, "high"),
    ("low", frozenset({"side_effects"}), None, "high"),
    ("low", frozenset({"regulated_domain"}), None, "medium"),
    ("high", frozenset({"regulated_domain"}), None, "high"),
    ("low", frozenset(), "high", "high"),
    ("low", frozenset(), "medium", "medium"),
    ("medium", frozenset(), "low", "low"),
    ("high", frozenset(), "low", "low"),
    ("low", frozenset({"pii"}), "low", "high"),
    ("low", frozenset({"regulated_domain"}), "low", "medium"),
    ("medium", frozenset({"regulated_domain"}), "high", "high"),
    ("high", frozenset({"side_effects", "regulated_domain"}), "medium", "high"),
]


@pytest.mark.parametrize(("model", "signals", "hint", "expected"), TABLE)
def test_combine_risk_table(
    model: Risk, signals: frozenset[Signal], hint: Risk | None, expected: Risk
) -> None:
    """Each row of the decision table gives its documented risk."""
    assert combine_risk(model, signals, hint) == expected


@given(
    model=st.sampled_from(RISKS),
    signals=st.frozensets(st.sampled_from(SIGNALS)),
    hint=st.none() | st.sampled_from(RISKS),
)
def test_risk_never_below_signal_floor_and_hint_honoured_above_it(
    model: Risk, signals: frozenset[Signal], hint: Risk | None
) -> None:
    """The result is never below the signals' floor and is at least the hint when given."""
    result = combine_risk(model, signals, hint)
    assert RISK_ORDER[result] >= RISK_ORDER[risk_floor(signals)]
    base = hint if hint is not None else model
    assert RISK_ORDER[result] == max(RISK_ORDER[base], RISK_ORDER[risk_floor(signals)])


@given(
    model=st.sampled_from(RISKS),
    signals=st.frozensets(st.sampled_from(SIGNALS)),
    hint=st.none() | st.sampled_from(RISKS),
)
def test_a_raise_only_hint_never_lowers_the_models_risk(
    model: Risk, signals: frozenset[Signal], hint: Risk | None
) -> None:
    """`hint_may_lower=False` (a key's `risk_hints: raise_only`): the risk is the highest of the
    model's, the hint's and the signals' floor; a hint below the model's opinion changes
    nothing, one above it raises the risk as a trusted hint would."""
    result = combine_risk(model, signals, hint, hint_may_lower=False)
    given_risks = [model, risk_floor(signals)] + ([hint] if hint is not None else [])
    assert RISK_ORDER[result] == max(RISK_ORDER[r] for r in given_risks)
    if hint is not None and RISK_ORDER[hint] >= RISK_ORDER[model]:
        assert result == combine_risk(model, signals, hint)


@pytest.mark.parametrize(("model", "hint", "expected"), [
    ("high", "low", "high"), ("medium", "low", "medium"), ("high", "medium", "high"),
    ("low", "high", "high"), ("low", "medium", "medium"), ("medium", "high", "high"),
])
def test_raise_only_table(model: Risk, hint: Risk, expected: Risk) -> None:
    assert combine_risk(model, frozenset(), hint, hint_may_lower=False) == expected
