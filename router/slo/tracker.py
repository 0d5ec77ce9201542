"""Tracks per-task SLOs over rolling windows; burn rates, demotion penalties and the snapshot.

The execution layer calls `record_request(obs)` once per answered request (router-level TTFT,
TPOT, E2E, error; cached answers count: they are what the user saw) and `record_attempt(obs)`
per upstream attempt (deployment x task x prompt-size series; cached answers are skipped). The
decision step reads `penalty(deployment, task, prompt_tokens, now)`: a dict look-up, recomputed
per key at most every `refresh_s` (or call `refresh(now)` from a background task to keep it off
the request path).

Latency depends on the request's size (prefill grows with the prompt), so a deployment's latency
burn demotes it only at the prompt size where it burns: a deployment that misses the TTFT target
on 8k-token prompts keeps its short ones. Availability is judged over all sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from policies.labels import Task
from router.slo.burn import (
    DEFAULT_RULES,
    BurnRule,
    attainment,
    budget_remaining,
    burn_rate,
    demotion_penalty,
    rule_fires,
    sure_burn_rate,
)
from router.slo.snapshot import (
    DeploymentSlo,
    SliWindow,
    SloSnapshot,
    TargetsView,
    TaskSlo,
    WindowState,
)
from router.slo.targets import SLIS, Sli, SloTargets
from router.slo.windows import COLUMNS, TieredCounts, column
from router.stats.observation import Observation, prompt_bucket, prompt_bucket_label
from router.stats.wakeup import REFRESH_BUDGET_S, Backlog, SpacedWakeup
from router.steady_clock import steady_time

# (task, deployment, prompt bucket); the task as a whole is (task, "", ALL_SIZES).
SeriesKey = tuple[Task, str, int]
# The snapshot's entry for every request, those refused before they had a task included (the
# router's own admission refusals): a task's SLO cannot count a request it never classified.
SERVICE = "all"
ALL_SIZES = -1
Burns = dict[float, float | None]
Sums = list[list[int]]  # per window, (total, bad) per SLI


_AVAILABILITY = column("availability")


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Windows, rules, slot resolution, and how often penalties are recomputed."""

    rules: tuple[BurnRule, ...] = DEFAULT_RULES
    resolution_s: float = 10.0
    refresh_s: float = 1.0
    min_events: int = 10  # below this many events in the short window a rule cannot fire
    # A demotion holds only while this last minute burns too (`demotion_penalty`); alerts and
    # the snapshot read the rules' windows alone.
    current_s: float = 60.0
    # SLIs whose budget burn demotes a deployment for the task: latency ones at the prompt size
    # where they burn, availability at every size. Dropping the latency SLIs was tried and made
    # recovery from a slow-then-failing deployment worse, so all count.
    demote_on: tuple[Sli, ...] = SLIS

    @property
    def windows_s(self) -> tuple[float, ...]:
        return tuple(sorted({w for r in self.rules for w in (r.short_s, r.long_s)}))


def event_deltas(obs: Observation, targets: SloTargets, streamed: bool = True) -> list[int]:
    """(total, bad) per SLI for one observation; latency SLIs count successful answers only.
    A non-streamed answer counts for E2E and availability only: its first content is the whole
    answer, so its "TTFT" is its generation time, which a TTFT target does not speak of."""
    out = [0] * (2 * len(SLIS))
    ok = obs.error is None
    checks: tuple[tuple[Sli, float | None, float | None], ...] = (
        ("ttft", targets.ttft_p95_s, obs.ttft_s if streamed else None),
        ("tpot", targets.tpot_p95_s, obs.tpot_s if streamed else None),
        ("e2e", targets.e2e_p99_s, obs.e2e_s if obs.whole else None),
    )
    for sli, target, value in checks:
        if ok and target is not None and value is not None:
            i = column(sli)
            out[i], out[i + 1] = 1, int(value > target)
    i = column("availability")
    out[i], out[i + 1] = 1, int(not ok)
    return out


class SloTracker:
    """Rolling SLO attainment and burn rates per task and per deployment x task."""

    def __init__(self, targets: Mapping[Task, SloTargets], config: SloConfig | None = None,
                 clock: Callable[[], float] = steady_time,
                 service_availability: float | None = None) -> None:
        self.targets = dict(targets)
        # Every request's availability (`record_service`), held to this objective; None: none.
        self._service_targets = (None if service_availability is None
                                 else SloTargets(availability=service_availability))
        self._service: TieredCounts | None = None
        self.config = config if config is not None else SloConfig()
        self._clock = clock
        self._series: dict[SeriesKey, TieredCounts] = {}
        self._penalties: dict[SeriesKey, tuple[float, float]] = {}  # key -> (at, penalty)
        self._read: set[SeriesKey] = set()  # keys requests read since the last background pass
        self._backlog: Backlog[SeriesKey] = Backlog()  # read keys a budgeted pass left
        self._wakeup = SpacedWakeup(self.config.refresh_s / 2, clock)
        self._windows_s = self.config.windows_s
        # Demotion reads the rules' windows and the current one.
        self._demotion_windows = tuple(sorted({*self._windows_s, self.config.current_s}))
        self._short = self._demotion_windows.index(min(r.short_s for r in self.config.rules))
        demoting = [sli for sli in SLIS if sli in self.config.demote_on]
        self._demoting_latency = tuple(sli for sli in demoting if sli != "availability")
        self._demoting_availability = tuple(sli for sli in demoting if sli == "availability")

    def _add(self, keys: tuple[SeriesKey, ...], obs: Observation, targets: SloTargets,
             streamed: bool) -> None:
        deltas = event_deltas(obs, targets, streamed)
        for key in keys:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = TieredCounts(self._demotion_windows,
                                                          self.config.resolution_s)
            series.add(obs.t, deltas)
        self._wakeup.notify()

    def record_request(self, obs: Observation, streamed: bool = True) -> None:
        """Count one answered (or failed) request against its task's SLO (`streamed`: whether
        its answer was, see `event_deltas`)."""
        targets = self.targets.get(obs.task)
        if targets is not None:
            self._add(((obs.task, "", ALL_SIZES),), obs, targets, streamed)

    def record_service(self, t: float, failed: bool) -> None:
        """Count one request (at time `t`) against the service's availability, whether or not
        it had a task: `failed` for a 5xx, the router's own refusals included."""
        if self._service_targets is None:
            return
        if self._service is None:
            self._service = TieredCounts(self._windows_s, self.config.resolution_s)
        deltas = [0] * COLUMNS
        deltas[_AVAILABILITY], deltas[_AVAILABILITY + 1] = 1, int(failed)
        self._service.add(t, deltas)

    def record_attempt(self, obs: Observation, streamed: bool = True) -> None:
        """Count one upstream attempt against its deployment x task x prompt-size series."""
        targets = self.targets.get(obs.task)
        if targets is not None and not obs.cached:
            # Its prompt size's series (latency demotion) and all sizes (availability, snapshot).
            self._add(((obs.task, obs.deployment, obs.bucket),
                       (obs.task, obs.deployment, ALL_SIZES)), obs, targets, streamed)

    def _sums(self, key: SeriesKey, now: float,
              windows: tuple[float, ...] | None = None) -> Sums | None:
        """Per window (the rules' unless given), the series' (total, bad) columns; None before
        any event."""
        series = self._series.get(key)
        if series is None:
            return None
        return series.sums(now, self._windows_s if windows is None else windows)

    def _burns(self, targets: SloTargets, sums: Sums) -> list[tuple[Sli, Burns, list[int]]]:
        """Per tracked SLI: name, burn per window, and totals per window."""
        windows = self._windows_s
        out: list[tuple[Sli, Burns, list[int]]] = []
        for sli in SLIS:
            objective = targets.objective(sli)
            if objective is None:
                continue
            i = column(sli)
            totals = [s[i] for s in sums]
            burns: Burns = {w: burn_rate(s[i + 1], s[i], objective)
                            for w, s in zip(windows, sums, strict=True)}
            out.append((sli, burns, totals))
        return out

    def _penalty_of(self, key: SeriesKey, now: float) -> float:
        """Latency SLIs from the request's prompt size, availability from every size; a sure
        burn is computed only for an SLI that may demote (`demote_on`, `min_events`)."""
        task, deployment, _ = key
        whole = self._sums((task, deployment, ALL_SIZES), now, self._demotion_windows)
        if whole is None:
            return 0.0
        sized = self._sums(key, now, self._demotion_windows)
        targets, windows = self.targets[task], self._demotion_windows
        short, min_events = self._short, self.config.min_events
        gated: list[Burns] = []
        for sums, slis in ((sized, self._demoting_latency), (whole, self._demoting_availability)):
            if sums is None:
                continue
            for sli in slis:
                objective = targets.objective(sli)
                i = column(sli)
                if objective is None or sums[short][i] < min_events:
                    continue
                gated.append({w: sure_burn_rate(s[i + 1], s[i], objective)
                              for w, s in zip(windows, sums, strict=True)})
        return demotion_penalty(gated, self.config.rules, self.config.current_s)

    def penalty(self, deployment: str, task: Task, prompt_tokens: int, now: float) -> float:
        """Demotion penalty in [0, 1] that the scorer reads for this deployment x task at this
        prompt size."""
        key = (task, deployment, prompt_bucket(prompt_tokens))
        self._read.add(key)
        cached = self._penalties.get(key)
        if cached is not None and now - cached[0] < self.config.refresh_s:
            return cached[1]
        value = self._penalty_of(key, now) if task in self.targets else 0.0
        self._penalties[key] = (now, value)
        return value

    def refresh(self, now: float, budget_s: float | None = None) -> None:
        """Recompute the penalties requests read since the last refresh (the background pass):
        busy keys never expire on the request path, and an idle service computes nothing. A key
        first read after a pause is computed by that read. With `budget_s`, the pass stops once
        it has run that long (by the tracker's clock) and leaves the other keys to the next."""
        read, self._read = self._read, set()

        def recompute(key: SeriesKey) -> None:
            if key[0] in self.targets:
                self._penalties[key] = (now, self._penalty_of(key, now))

        self._backlog.run(read, recompute, self._clock, budget_s)

    async def run_refresher(self) -> None:
        """`refresh` at the first recorded event at least `refresh_s / 2` after the previous
        pass (run as a task; cancel to stop). It never runs on a timer: events are recorded once
        an answer is on its way, so the pass rides on the wake-up of the request that recorded,
        and an idle process is not woken at all. A penalty whose cache has expired meanwhile is
        computed by the read that needs it (as without a refresher). A pass runs on the event
        loop, so it stops after `REFRESH_BUDGET_S` (the rest waits for the next pass); a key
        costs ~20 us, ~150 us when its 10 s slot has just turned over."""
        while True:
            self.refresh(await self._wakeup.wait(), budget_s=REFRESH_BUDGET_S)

    def snapshot(self, now: float | None = None, deployments: bool = True) -> SloSnapshot:
        """The state of every task's SLO, as `GET /v1/slo` returns it; without `deployments`,
        the tasks' own only (what the SLO gauges read: the deployments' series are most of the
        work, 14 ms at 803 series on the slow VM of 2026-12-07, at each scrape and export)."""
        at = now if now is not None else self._clock()
        sizes: dict[Task, dict[str, list[int]]] = {}  # per task and deployment, its buckets
        if deployments:  # one pass over the series (it was one sorted pass per task)
            for of_task, name, size in sorted(self._series):
                if name and size != ALL_SIZES:
                    sizes.setdefault(of_task, {}).setdefault(name, []).append(size)
        tasks = [self._task_view(task, at, sizes.get(task, {})) for task in sorted(self.targets)]
        service = self._service_targets
        if service is not None:
            sums = (None if self._service is None
                    else self._service.sums(at, self._windows_s))
            tasks.append(TaskSlo(
                task=SERVICE, targets=TargetsView(ttft_p95_s=None, tpot_p95_s=None,
                                                  e2e_p99_s=None,
                                                  availability=service.availability),
                windows=self._window_states(sums, service),
                burn_alerts=self._firing(sums, service), deployments=[]))
        return SloSnapshot(generated_at=at, windows_s=list(self.config.windows_s), tasks=tasks)

    def _windows(self, key: SeriesKey, now: float) -> list[WindowState]:
        return self._window_states(self._sums(key, now), self.targets[key[0]])

    def _window_states(self, sums: Sums | None, targets: SloTargets) -> list[WindowState]:
        if sums is None:
            return []
        out = []
        for w, s in zip(self._windows_s, sums, strict=True):
            slis = []
            for sli in SLIS:
                objective = targets.objective(sli)
                if objective is None:
                    continue
                i = column(sli)
                total, bad = s[i], s[i + 1]
                att = attainment(bad, total)
                slis.append(SliWindow(
                    sli=sli, objective=objective, total=total, bad=bad, attainment=att,
                    met=None if att is None else att >= objective,
                    burn_rate=burn_rate(bad, total, objective),
                    budget_remaining=budget_remaining(bad, total, objective)))
            out.append(WindowState(window_s=w, slis=slis))
        return out

    def _alerts(self, task: Task, now: float) -> list[str]:
        return self._firing(self._sums((task, "", ALL_SIZES), now), self.targets[task])

    def _firing(self, sums: Sums | None, targets: SloTargets) -> list[str]:
        if sums is None:
            return []
        out = []
        for sli, burns, _ in self._burns(targets, sums):
            for rule in self.config.rules:
                if rule_fires(rule, burns) is not None:
                    out.append(f"{sli} {rule.long_s:g}s/{rule.short_s:g}s >= {rule.threshold:g}")
        return out

    def _task_view(self, task: Task, now: float, sizes: Mapping[str, list[int]]) -> TaskSlo:
        """`sizes`: per deployment, the prompt buckets it has series for (none: no deployment
        in the view)."""
        t = self.targets[task]
        deployments = []
        for name, buckets in sizes.items():
            by_size = {prompt_bucket_label(b): self._penalty_of((task, name, b), now)
                       for b in buckets}
            worst = max(by_size.values())
            deployments.append(DeploymentSlo(
                deployment=name, windows=self._windows((task, name, ALL_SIZES), now),
                penalty=worst, demoted=worst > 0.0, penalty_by_prompt_tokens=by_size))
        return TaskSlo(
            task=task,
            targets=TargetsView(ttft_p95_s=t.ttft_p95_s, tpot_p95_s=t.tpot_p95_s,
                                e2e_p99_s=t.e2e_p99_s, availability=t.availability),
            windows=self._windows((task, "", ALL_SIZES), now),
            burn_alerts=self._alerts(task, now), deployments=deployments)
