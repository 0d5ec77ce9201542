"""Sticky assignment of units (tenant, user, session or request) to experiment arms.

Pure functions: the arm is a function of (salt, experiment name, unit id, shares, halted arms)
only, hashed with SHA-256 (never Python's salted `hash`), so every replica and every restart
agrees. A unit keeps its arm as long as the salt and the shares do not change; a halted arm's
units are served by control. Nothing here records outcomes or reads a clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from policies.experiments.schema import ArmSpec, AssignmentUnit, ExperimentSpec
from policies.labels import Task

_SCALE: Final[float] = float(2**64)


@dataclass(frozen=True, slots=True)
class UnitIds:
    """The identifiers a request offers; `request` (the request id) is always present."""

    request: str
    tenant: str | None = None
    user: str | None = None
    session: str | None = None

    def get(self, unit: AssignmentUnit) -> str | None:
        """The id for `unit`, or None when the request does not carry one."""
        values: dict[AssignmentUnit, str | None] = {
            "tenant": self.tenant,
            "user": self.user,
            "session": self.session,
            "request": self.request,
        }
        return values[unit]


@dataclass(frozen=True, slots=True)
class Assignment:
    """Which arm serves a request; `assigned_arm` differs from `arm` when it was halted."""

    experiment: str
    arm: str
    assigned_arm: str
    route: str
    unit: AssignmentUnit
    unit_id: str

    @property
    def redirected(self) -> bool:
        """True when the unit's arm is halted and control serves it instead."""
        return self.arm != self.assigned_arm


def unit_fraction(salt: str, experiment: str, unit_id: str) -> float:
    """A uniform number in [0, 1) from SHA-256 of the salted unit id, equal on every process."""
    payload = "\x1f".join((salt, experiment, unit_id)).encode("utf-8")
    digest = hashlib.sha256(payload).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def arm_for_fraction(arms: tuple[ArmSpec, ...], fraction: float) -> ArmSpec:
    """The arm whose cumulative share interval [lo, hi) holds `fraction` (last arm takes rest)."""
    upper = 0.0
    for arm in arms:
        upper += arm.share
        if fraction < upper:
            return arm
    return arms[-1]


def assign(
    spec: ExperimentSpec,
    task: Task,
    units: UnitIds,
    now: datetime,
    halted: frozenset[str] = frozenset(),
) -> Assignment | None:
    """The arm for this request, or None when the experiment does not apply to it.

    It does not apply when the task is not listed, `now` is outside [start, stop), or the
    request has no id for the experiment's unit (e.g. unit `user` and no `user` field).
    """
    unit_id = units.get(spec.unit)
    if task not in spec.tasks or not spec.is_running(now) or not unit_id:
        return None
    picked = arm_for_fraction(spec.arms, unit_fraction(spec.salt, spec.name, unit_id))
    serving = spec.control if picked.name in halted else picked
    return Assignment(
        experiment=spec.name,
        arm=serving.name,
        assigned_arm=picked.name,
        route=serving.route,
        unit=spec.unit,
        unit_id=unit_id,
    )


class Assigner:
    """The experiments of one policy set; a request joins the first running one for its task."""

    def __init__(self, specs: Iterable[ExperimentSpec]) -> None:
        self._specs: tuple[ExperimentSpec, ...] = tuple(specs)

    @property
    def specs(self) -> tuple[ExperimentSpec, ...]:
        """The experiments, in policy-file order."""
        return self._specs

    def assign(
        self,
        task: Task,
        units: UnitIds,
        now: datetime,
        halted: Mapping[str, frozenset[str]] | None = None,
    ) -> Assignment | None:
        """The assignment in the first experiment that applies, or None (no experiment)."""
        halted_by_name = halted if halted is not None else {}
        for spec in self._specs:
            found = assign(spec, task, units, now, halted_by_name.get(spec.name, frozenset()))
            if found is not None:
                return found
        return None
