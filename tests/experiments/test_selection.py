"""The selection check: each arm's share of requests the policy barred its route from."""

from __future__ import annotations

import pytest

from router.experiments.selection import SELECTION_SHARE_LIMIT, selection_check


def test_an_arm_with_barred_requests_past_the_limit_is_flagged_and_others_are_not() -> None:
    check = selection_check({"small": 45, "tiny": 1}, {"control": 95, "small": 51, "tiny": 199})
    assert check.barred == {"control": 0, "small": 45, "tiny": 1}
    assert check.shares["small"] == pytest.approx(45 / 96)
    assert check.shares["tiny"] == pytest.approx(1 / 200)
    assert check.shares["tiny"] < SELECTION_SHARE_LIMIT
    assert check.shares["control"] == 0.0
    assert check.flagged == ("small",)


def test_an_arm_every_request_of_which_was_barred_is_flagged_and_an_empty_arm_is_not() -> None:
    check = selection_check({"small": 12, "gone": 3}, {"control": 20, "small": 0, "idle": 0})
    assert check.shares == {"control": 0.0, "small": 1.0, "idle": 0.0}
    assert check.barred == {"control": 0, "small": 12, "idle": 0}  # arms of the spec only
    assert check.flagged == ("small",)


def test_the_limit_is_inclusive() -> None:
    assert selection_check({"b": 1}, {"b": 99}, limit=0.01).flagged == ("b",)
    assert selection_check({"b": 1}, {"b": 100}, limit=0.01).flagged == ()
