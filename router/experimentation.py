"""A/B experiments in the running service: assignment, outcome recording, guardrails, reports.

Glue only: the statistics and the sticky assignment live in `router.experiments` and
`policies.experiments`. An arm's `route` is `policy:default` (the task's policy as written) or
`model:<name>` (the policy restricted to that model: its floor, risk and fit checks still apply;
if the model does not qualify the request is routed as control would). Halted arms send their
units to control; halts come from the guardrail loop and are logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from policies.experiments import Assigner, Assignment, ExperimentSpec, UnitIds
from policies.labels import Task
from router.errors import OverloadedError, SlorouterError
from router.experiments.monitor import enforce_guardrails, halted_arms, report_from_store
from router.experiments.outcomes import Exposure, OutcomeStore, exposure_key, submit_feedback
from router.experiments.outcomes import Outcome as ArmOutcome
from router.logs import ThrottledEvent, event
from router.outcomes import Outcome
from router.redis_auth import refusal

log = logging.getLogger("slorouter.experiments")
WallClock = Callable[[], datetime]


class Experiments:
    def __init__(self, specs: Sequence[ExperimentSpec], store: OutcomeStore,
                 clock: WallClock = lambda: datetime.now(UTC)) -> None:
        self._assigner = Assigner(specs)
        self._specs = {spec.name: spec for spec in specs}
        self._store = store
        self._clock = clock
        # The halts read from the store. A shared store's halts are not known until its first
        # read: until then every treatment counts as halted (control serves), or a replica
        # started while Redis was down served arms the others had halted (the rollout audit).
        self._halted: dict[str, frozenset[str]] | None = (
            None if getattr(store, "shared", False) else {})
        self._unread_halts = {spec.name: frozenset(arm.name for arm in spec.treatments)
                              for spec in specs}
        self._pending: set[asyncio.Task[None]] = set()
        # The service's event loop, for writes started in a worker thread (the pipeline
        # routes on the loop since 2026-12-07; a caller off it is still served).
        self._loop: asyncio.AbstractEventLoop | None = None
        # A shared store that is down fails every write and every guardrail pass: one line per
        # interval for each, and the loop and the requests carry on.
        self._lost = ThrottledEvent(log, "experiment_outcome_lost",
                                    recovered_name="experiment_outcomes_recorded_again")
        self._guard_failed = ThrottledEvent(log, "experiment_guardrails_failed",
                                            recovered_name="experiment_guardrails_recovered")
        self._unavailable = ThrottledEvent(log, "experiments_store_unavailable")

    @property
    def store(self) -> OutcomeStore:
        return self._store

    @property
    def active(self) -> bool:
        return bool(self._specs)

    def assign(self, task: Task, units: UnitIds) -> Assignment | None:
        """The unit's arm. The unit is counted once on the arm it hashes to (for the SRM
        check), before anything that depends on the arm: a halt sending it to control, the
        policy barring the arm's model, a failure; the exposure is `expose`'s."""
        if not self._specs:
            return None
        halted = self._halted if self._halted is not None else self._unread_halts
        assignment = self._assigner.assign(task, units, self._clock(), halted)
        if assignment is not None:
            self._spawn(self._store.count_unit(
                assignment.experiment, assignment.assigned_arm,
                unit_key(assignment.unit, assignment.unit_id),
                expires=assignment.unit == "request"))
        return assignment

    def expose(self, assignment: Assignment, units: UnitIds) -> None:
        """Store at once that the arm's route serves this request, so feedback on it may
        arrive any time (not for an answer control's route gives for the arm: not its own)."""
        self._spawn(self._store.expose(exposure_key(units.tenant, units.request),
                                       Exposure(assignment.experiment, assignment.arm)))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a worker thread
            if self._loop is None or self._loop.is_closed():
                work.close()
                self._lost.report(error="NoEventLoop")
                return
            # It raised here, so every such request of an experiment failed.
            self._loop.call_soon_threadsafe(self._spawn, work)
            return
        self._loop = loop
        task = loop.create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[None]) -> None:
        """A background write ended: a failure (the store is down) is logged, throttled; the
        exposure or outcome it carried is lost to the experiment."""
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._lost.report(error=type(task.exception()).__name__)
        elif not task.cancelled():
            self._lost.recovered()

    def record(self, outcome: Outcome) -> None:
        """`OutcomeSink`: hand the request's arm outcome to the (async) store."""
        # Only a request the arm's route acted on (`routed`) is one of its outcomes: an
        # Idempotency-Key duplicate replayed (the arm ran once, not once per retry), refused
        # in flight or for another body, or refused as the idempotency store is down (a 503
        # that was an arm error, so a Redis blip could halt a healthy arm) is none.
        if outcome.experiment is None or outcome.arm is None or not outcome.routed:
            return
        # A request the policy bars the arm's model from (its risk rule, fit, the cost
        # ceiling) is outside what the arm can be asked: none of its outcomes either (it used
        # to count as a success, diluting a failing arm's error rate, or, when control's route
        # then failed, as the arm's error). It is counted, so the report can say the arm's
        # figures are of the rest: the long prompts a small context window refuses made a
        # 3x-priced arm read 80% cheaper than control, which kept them (the A/B audit).
        if outcome.arm_ineligible:
            self._spawn(self._store.count_barred(outcome.experiment, outcome.arm))
            return
        ttft, e2e = outcome.ttft_s, outcome.e2e_s
        # The client's choice, not the arm's failure: it left, or its own deadline, shorter
        # than a stall, cut the request (the SLO tracker's rule: an OpenAI SDK's timeout comes
        # as that deadline, and counted as the arm's error until 2026-12-07).
        client_cut = outcome.client_disconnected or outcome.cut_by_client
        if ttft is None and client_cut:
            # Cut before the first token: it waited at least that long. Its TTFT is what it
            # waited (censored, as its E2E is), so an arm its clients give up on shows slow,
            # not without TTFT (nothing for its p95 guardrail or the test to see).
            ttft = e2e
        if outcome.arm_degraded:  # control's route answered: only the arm's failure counts
            ttft = e2e = None
        if not (outcome.status == 200 or client_cut):
            # Latencies are those of the arm's answers (the SLO's rule): a failure's time is
            # not one, and an arm failing in 6 ms read as four times faster (the A/B audit of
            # 2026-12-07). A client's leaving is kept, censored, as above.
            ttft = e2e = None
        if not outcome.stream:
            # A whole answer's first content is all of it: its time is its E2E, no TTFT (the
            # SLO's rule). Counted as one, an arm that answers sooner but starts later read
            # twice as fast in TTFT, and a TTFT guardrail halted a healthy arm.
            ttft = None
        # An arm whose route could not serve (its model unavailable) was answered by control's
        # route; for the experiment that is the arm failing, so its guardrails can stop it.
        arm_outcome = ArmOutcome(
            experiment=outcome.experiment, arm=outcome.arm,
            request_id=exposure_key(outcome.tenant, outcome.request_id),
            error=(outcome.status >= 500 or outcome.status == 429 or outcome.arm_degraded)
            and not client_cut,
            ttft_ms=ttft * 1e3 if ttft is not None else None,
            tpot_ms=outcome.tpot_s * 1e3 if outcome.tpot_s is not None and e2e is not None
            else None,
            e2e_ms=e2e * 1e3 if e2e is not None else None,
            # a request that billed nothing (a cache hit, errors no provider charges) cost the
            # arm nothing: left out, a route that caches better got no credit for it
            cost_usd=None if outcome.arm_degraded else (outcome.cost_usd or 0.0),
            answered=not outcome.arm_degraded)
        self._spawn(self._store.record(arm_outcome))

    async def feedback(self, tenant: str, request_id: str, metric: str,
                       value: float) -> dict[str, Any]:
        """Feedback on one of `tenant`'s own requests (another tenant's ids are unknown here)."""
        if self._pending:  # exposures of requests answered a moment ago may still be in flight
            await asyncio.gather(*self._pending, return_exceptions=True)
        try:
            exposure, recorded = await submit_feedback(self._store, self._specs, tenant,
                                                       request_id, metric, value)
        except SlorouterError:
            raise
        except Exception as exc:
            raise self._store_down(exc) from exc
        return {"request_id": request_id, "experiment": exposure.experiment,
                "arm": exposure.arm, "metric": metric, "recorded": recorded}

    async def reports(self, name: str | None = None) -> list[dict[str, Any]]:
        rng = np.random.default_rng(0)
        specs = [s for s in self._specs.values() if name is None or s.name == name]
        try:
            return [(await report_from_store(spec, self._store, now=self._clock(), rng=rng,
                                             resamples=400)).model_dump(mode="json")
                    for spec in specs]
        except Exception as exc:
            raise self._store_down(exc) from exc

    def _store_down(self, exc: BaseException) -> OverloadedError:
        """The outcome store failed under a request (only a remote one can): a 503 to retry,
        unless it refuses the router's credentials or database, which no retry mends (a 503
        the SDKs are told not to retry, as the idempotency store's; until 2026-12-07 it asked
        for a retry in 1 s: the docs audit)."""
        self._unavailable.report(error=type(exc).__name__)
        if refusal(exc) is not None:
            return OverloadedError(
                "the experiments store refuses the router's Redis credentials or database: "
                "feedback and reports are refused until the router's configuration is fixed "
                "(retrying will not help)", code="experiments_store_misconfigured")
        return OverloadedError("the experiments store is unavailable; retry shortly",
                               code="experiments_store_unavailable", retry_after=1.0)

    async def guard(self, interval_s: float = 0.5) -> None:
        """Evaluate guardrails forever; halted arms stop receiving traffic at once."""
        self._loop = asyncio.get_running_loop()
        while True:
            try:
                await self.check_guardrails()
            except Exception as exc:  # the store is down: keep the last halts, try again
                self._guard_failed.report(error=type(exc).__name__)
            else:
                self._guard_failed.recovered()
            await asyncio.sleep(interval_s)

    async def check_guardrails(self) -> None:
        """Enforce every experiment's guardrails, then read the halts. One experiment whose
        enforcement fails (a record of another shape) stops neither the others' nor the halts'
        reading: it raised past them, and a replica that had read no halt yet served control
        to every unit of every experiment for as long (the re-audit); its failure is raised
        once the halts are read."""
        now = self._clock()
        failed: Exception | None = None
        for spec in self._specs.values():
            try:
                for halt in await enforce_guardrails(spec, self._store, now):
                    event(log, "experiment_arm_halted", logging.WARNING, experiment=spec.name,
                          arm=halt.arm, reason=halt.reason)
            except Exception as exc:  # raised below, after the halts are read
                failed = exc
        self._halted = await halted_arms(self._store, self._specs.values())
        if failed is not None:
            raise failed

    def specs(self) -> Mapping[str, ExperimentSpec]:
        return self._specs


def unit_key(unit: str, unit_id: str) -> str:
    """What the store keeps of a unit for the SRM count: a hash, not the user's id."""
    return hashlib.sha256(f"{unit}\x1f{unit_id}".encode()).hexdigest()[:24]


def memory_store() -> OutcomeStore:
    from router.experiments.outcomes import MemoryOutcomeStore

    return MemoryOutcomeStore(random.Random(0))
