"""Sticky assignment: same arm on every replica and after restarts, shares respected."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from policies.experiments.assignment import Assigner, UnitIds, arm_for_fraction, unit_fraction
from tests.experiments.support import make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)
THREE_ARMS = [
    {"name": "control", "route": "policy:chat", "control": True, "share": 0.6},
    {"name": "small", "route": "model:small", "share": 0.3},
    {"name": "other", "route": "model:other", "share": 0.1},
]


def _arms(assigner: Assigner, users: range, halted: frozenset[str] = frozenset()) -> list[str]:
    found = [assigner.assign("chat", UnitIds(request=f"r{i}", user=f"user-{i}"), NOW,
                             {"chat-cheaper": halted}) for i in users]
    return [a.arm for a in found if a is not None]


def test_two_replicas_and_a_restart_agree_on_every_unit() -> None:
    """Two independent assigners and a fresh one give each user the same arm."""
    spec = make_spec(arms=THREE_ARMS)
    users = range(5000)
    replica_a, replica_b = Assigner([spec]), Assigner([spec])
    first = _arms(replica_a, users)
    assert first == _arms(replica_b, users)
    assert first == _arms(Assigner([make_spec(arms=THREE_ARMS)]), users)


def test_assignment_is_identical_in_another_process_with_another_hash_seed() -> None:
    """A new interpreter (different PYTHONHASHSEED) computes the same unit fractions."""
    code = ("from policies.experiments.assignment import unit_fraction;"
            "print([unit_fraction('s', 'e', f'u{i}') for i in range(50)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=".")
    assert out.stdout.strip() == str([unit_fraction("s", "e", f"u{i}") for i in range(50)])


def test_splits_match_configured_shares_within_sampling_error() -> None:
    """Over 20k users each arm's count is consistent with its share (binomial test)."""
    spec = make_spec(arms=THREE_ARMS)
    users = range(20_000)
    arms = _arms(Assigner([spec]), users)
    for arm in spec.arms:
        result = binomtest(arms.count(arm.name), len(arms), arm.share)
        assert result.pvalue > 0.001, (arm.name, arms.count(arm.name))


def test_halted_arm_units_go_to_control_and_others_keep_their_arm() -> None:
    """Halting `small` redirects exactly its units to control; `other` is untouched."""
    assigner = Assigner([make_spec(arms=THREE_ARMS)])
    users = range(3000)
    before = _arms(assigner, users)
    after = _arms(assigner, users, halted=frozenset({"small"}))
    assert "small" not in after
    for was, now in zip(before, after, strict=True):
        assert now == ("control" if was == "small" else was)


def test_redirected_assignment_keeps_the_hashed_arm_for_the_record() -> None:
    """A redirected assignment says which arm the unit belongs to and that it was redirected."""
    spec = make_spec(arms=THREE_ARMS)
    user = next(f"u{i}" for i in range(1000)
                if arm_for_fraction(spec.arms, unit_fraction(spec.salt, spec.name, f"u{i}")).name
                == "small")
    units = UnitIds(request="r", user=user)
    found = Assigner([spec]).assign("chat", units, NOW, {spec.name: frozenset({"small"})})
    assert found is not None
    assert (found.arm, found.assigned_arm, found.redirected) == ("control", "small", True)
    assert found.route == spec.control.route


def test_experiment_applies_only_to_its_tasks_window_and_units() -> None:
    """Other tasks, times outside [start, stop) and requests without the unit id are not in."""
    spec = make_spec(start=NOW, stop=NOW + timedelta(days=7))
    assigner = Assigner([spec])
    with_user = UnitIds(request="r1", user="alice")
    assert assigner.assign("chat", with_user, NOW) is not None
    assert assigner.assign("code", with_user, NOW) is None
    assert assigner.assign("chat", with_user, NOW - timedelta(seconds=1)) is None
    assert assigner.assign("chat", with_user, NOW + timedelta(days=7)) is None
    assert assigner.assign("chat", UnitIds(request="r1"), NOW) is None


def test_request_unit_hashes_the_request_id() -> None:
    """With unit `request`, the unit id is the request id and repeats agree."""
    assigner = Assigner([make_spec(unit="request")])
    first = assigner.assign("chat", UnitIds(request="req-42", user="alice"), NOW)
    again = assigner.assign("chat", UnitIds(request="req-42", user="bob"), NOW)
    assert first is not None and again is not None
    assert first.unit_id == "req-42"
    assert first.arm == again.arm


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_unit_fraction_is_in_the_unit_interval(salt: str, name: str, unit: str) -> None:
    """Every hashed fraction lies in [0, 1)."""
    assert 0.0 <= unit_fraction(salt, name, unit) < 1.0


@given(st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_arm_for_fraction_follows_cumulative_shares(fraction: float) -> None:
    """The arm picked is the one whose cumulative share interval contains the fraction."""
    spec = make_spec(arms=[{**arm, "share": share} for arm, share in
                           zip(THREE_ARMS, (0.5, 0.25, 0.25), strict=True)])
    expected = "control" if fraction < 0.5 else ("small" if fraction < 0.75 else "other")
    assert arm_for_fraction(spec.arms, fraction).name == expected
