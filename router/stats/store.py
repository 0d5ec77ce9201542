"""The `StatsStore` seam and its in-memory implementation.

The execution layer writes (`begin`, `first_token`, `end`, `record` in its `finally`); the
decision step reads `view(deployment, task, prompt_tokens)`: a few dict look-ups returning frozen
`KeySummary` values. Summaries are recomputed from the sketches off the request path by
`refresh()` (run by `run_refresher()` every `refresh_interval_s`), only for keys that decisions
read. The local store also holds what other replicas published (set by `RedisStatsStore`) and
merges it into its summaries. Redis I/O lives in `redis_store.py`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict

from policies.labels import Task
from router.stats.decay import Decay
from router.stats.estimators import (
    ANY,
    ANY_BUCKET,
    E2E,
    KeyState,
    KeySummary,
    StatKey,
    kept_at,
    keys_for,
    read_at,
)
from router.stats.inflight import InFlight
from router.stats.observation import PROMPT_BUCKET_EDGES, Observation
from router.stats.sketch import DEFAULT_ALPHA
from router.stats.wakeup import REFRESH_BUDGET_S, Backlog, SpacedWakeup
from router.steady_clock import steady_time

Clock = Callable[[], float]
# Builds a `NamedTuple` without its generated Python `__new__` (hot path: every field, in order).
_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class StatsConfig:
    """Estimator settings: decay half-life, sketch accuracy, summary refresh.

    Summaries of keys that decisions read are recomputed by `refresh()` (a background task runs
    `run_refresher()` every `refresh_interval_s`); a read recomputes only a key never summarised
    or a changed key whose summary is older than `max_staleness_s` (the safety net without a
    refresher, and the first read of a key after a pause). While the refresher runs (a refresh
    within `max_staleness_s`), a key that decisions keep reading (read since the refresh
    before last) is left to the next refresh instead, at most `refresh_interval_s` away, as
    every busy key is: so a request does not pay for recomputing a summary because an idle
    candidate just got one new observation.
    """

    half_life_s: float = 5.0
    alpha: float = DEFAULT_ALPHA
    refresh_interval_s: float = 0.1
    max_staleness_s: float = 1.0


class StatsView(NamedTuple):
    """What the scorer reads about one deployment for one request (all levels, finest first).

    A `NamedTuple` rather than a frozen dataclass: it is built per candidate per request.
    """

    deployment: str
    bucket: KeySummary | None  # deployment x task x prompt bucket
    task: KeySummary | None  # deployment x task
    deployment_all: KeySummary | None  # deployment, every task (holds the TTFT model)
    in_flight: int
    oldest_waiting_since: float | None  # streamed attempts, waiting for their first token
    oldest_unstreamed_since: float | None = None  # non-streamed ones, waiting for the answer


class _Levels(NamedTuple):
    """The three levels' summaries as `view()` serves them, and how long they stay valid."""

    fresh_from: float  # valid while `now - fresh_from < max_staleness_s` (see `_levels_of`)
    unsummarised: tuple[StatKey, ...]  # levels without a summary: invalid once one is recorded
    bucket: KeySummary | None
    task: KeySummary | None
    deployment_all: KeySummary | None


def _level_keys(bucket_key: StatKey) -> tuple[StatKey, StatKey, StatKey]:
    """The keys behind one `view()`: deployment x task x bucket, deployment x task, deployment."""
    deployment, task, _ = bucket_key
    return bucket_key, (deployment, task, ANY_BUCKET), (deployment, ANY, ANY_BUCKET)


def _levels_of(keys: tuple[StatKey, StatKey, StatKey],
               found: tuple[KeySummary | None, KeySummary | None, KeySummary | None],
               refreshed_at: float | None) -> _Levels:
    """The summaries `found` for `keys` (as reading them key by key returned them), kept for as
    long as reading them again would return the same, provided the keys stay read (`_wanted`
    or `_recent`) and summaries do not change: a key without a summary is recomputed by a read
    once it is recorded (`unsummarised`); one with a summary only once both it and the last
    refresh are older than `max_staleness_s` (`_stale_read`). So `fresh_from` is the earliest,
    over the summaries, of the later of their time and the last refresh."""
    fresh_from = math.inf
    unsummarised: list[StatKey] = []
    for key, summary in zip(keys, found, strict=True):
        if summary is None:
            unsummarised.append(key)
            continue
        at = summary.at if refreshed_at is None else max(summary.at, refreshed_at)
        fresh_from = min(fresh_from, at)
    return _new(_Levels, (fresh_from, tuple(unsummarised), *found))


class StoreStatus(BaseModel):
    """Health of a statistics store, for `/readyz` and logs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["local", "redis"]
    healthy: bool
    detail: str
    keys: int
    replicas_seen: int = 0
    last_sync_at: float | None = None


class StatsStore(Protocol):
    """Online latency and error statistics, written after each attempt, read by the decision."""

    def begin(self, deployment: str, t: float, prompt_tokens: int = 0,
              streamed: bool = True) -> int: ...
    def first_token(self, ticket: int) -> None: ...
    def end(self, ticket: int) -> None: ...
    def record(self, obs: Observation) -> None: ...
    def view(self, deployment: str, task: Task, prompt_tokens: int) -> StatsView: ...
    def task_summary(self, task: Task) -> KeySummary | None: ...
    @property
    def load(self) -> Mapping[str, int]: ...
    def ttft_quantile(self, deployment: str, task: Task,
                      q: float) -> tuple[float | None, float]: ...
    def ttft_quantiles(self, deployment: str, task: Task,
                       qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]: ...
    def e2e_quantiles(self, deployment: str, task: Task,
                      qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]: ...
    def ttft_quantiles_at_size(self, deployment: str, prompt_tokens: int, qs: Sequence[float],
                               min_trust: float) -> tuple[tuple[float, ...] | None, float]: ...
    @property
    def healthy(self) -> bool: ...
    def status(self) -> StoreStatus: ...


class LocalStatsStore:
    """In-memory statistics: own observations plus (optionally) other replicas' published state."""

    def __init__(self, config: StatsConfig | None = None, clock: Clock = steady_time) -> None:
        self.config = config if config is not None else StatsConfig()
        self._decay = Decay(self.config.half_life_s)
        self._clock = clock
        self._own: dict[StatKey, KeyState] = {}
        self._remote: dict[str, dict[StatKey, KeyState]] = {}
        self._remote_merged: dict[StatKey, KeyState] = {}
        self._remote_in_flight: dict[str, dict[str, int]] = {}
        self._summaries: dict[StatKey, KeySummary] = {}
        # What `view()` serves per (deployment, task, bucket); rebuilt by `refresh()` for those
        # read since the refresh before (`_levels_read`), cleared when a read recomputes.
        self._levels: dict[StatKey, _Levels] = {}
        self._levels_read: set[StatKey] = set()
        self._dirty: set[StatKey] = set()
        self._wanted: set[StatKey] = set()  # read since the last refresh
        self._recent: set[StatKey] = set()  # read between the last two refreshes
        self._unpushed: set[StatKey] = set()
        self._in_flight = InFlight()
        self._refreshed_at: float | None = None
        self._backlog: Backlog[StatKey] = Backlog()  # due keys a budgeted refresh left
        self._wakeup = SpacedWakeup(self.config.refresh_interval_s, clock)

    # -- writes (execution layer, in `finally`) ------------------------------------------------
    def begin(self, deployment: str, t: float, prompt_tokens: int = 0,
              streamed: bool = True) -> int:
        """An attempt on `deployment` with a prompt of `prompt_tokens` starts at `t` (a
        non-streamed one with `streamed=False`); returns a ticket for `first_token`/`end`."""
        return self._in_flight.begin(deployment, t, prompt_tokens, streamed)

    def first_token(self, ticket: int) -> None:
        self._in_flight.first_token(ticket)

    def end(self, ticket: int) -> None:
        self._in_flight.end(ticket)

    def record(self, obs: Observation) -> None:
        """Fold one observation into every key it belongs to (a few microseconds)."""
        for key in keys_for(obs):
            state = self._own.get(key)
            if state is None:
                state = self._own[key] = self._new_state(key)
            state.record(obs)
            self._dirty.add(key)
            self._unpushed.add(key)
        self._wakeup.notify()

    def _new_state(self, key: StatKey) -> KeyState:
        with_model = key[0] != ANY and key[1] == ANY
        return KeyState(self._decay, self.config.alpha, with_model, kept_at(key))

    # -- reads (decision step, hot path) -------------------------------------------------------
    def view(self, deployment: str, task: Task, prompt_tokens: int) -> StatsView:
        """The frozen summaries for one candidate; cheap (one dict look-up, rare recompute).

        Runs once per candidate per request, so the three levels are kept per (deployment,
        task, bucket) in `_levels`: read key by key through `summary()` on a first read (or
        once they may have changed), then served as they are until the next refresh, which
        rebuilds them from the summaries it leaves. Same results as three `summary()` reads.
        """
        now = self._clock()
        bucket_key = (deployment, task, bisect_right(PROMPT_BUCKET_EDGES, prompt_tokens))
        levels = self._levels.get(bucket_key)
        if (levels is None or not now - levels[0] < self.config.max_staleness_s
                or (levels[1] and not self._dirty.isdisjoint(levels[1]))):
            levels = self._read_levels(bucket_key, now)
        self._levels_read.add(bucket_key)
        flight = self._in_flight.view(deployment, bucket_key[2])
        count = flight[0]
        if self._remote_in_flight:
            count += sum(c.get(deployment, 0) for c in self._remote_in_flight.values())
        return _new(StatsView, (deployment, levels[2], levels[3], levels[4], count, flight[1],
                                flight[2]))

    def _read_levels(self, bucket_key: StatKey, now: float) -> _Levels:
        keys = _level_keys(bucket_key)
        summary = self.summary
        found = (summary(keys[0], now), summary(keys[1], now), summary(keys[2], now))
        levels = self._levels[bucket_key] = _levels_of(keys, found, self._refreshed_at)
        return levels

    def ttft_quantile(self, deployment: str, task: Task, q: float) -> tuple[float | None, float]:
        """This replica's decayed TTFT at any quantile `q` for deployment x task, and how many
        (decayed) successes back it. Read from the sketch itself, so a level between the
        summaries' fixed ones (e.g. a hedge trigger at p88) sees a bimodal tail as it is."""
        found, weight = self.ttft_quantiles(deployment, task, (q,))
        return (None if found is None else found[0]), weight

    def ttft_quantiles(self, deployment: str, task: Task,
                       qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]:
        """`ttft_quantile` at several ascending levels `qs` from one pass over the sketch (one
        sort of its buckets, however many levels): the values (None without data) and weight."""
        return self._quantiles("ttft", deployment, task, qs)

    def e2e_quantiles(self, deployment: str, task: Task,
                      qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]:
        """As `ttft_quantiles`, of the E2E of non-streamed answers (what a non-streamed
        request waits for before its first content)."""
        return self._quantiles(E2E, deployment, task, qs)

    def ttft_quantiles_at_size(self, deployment: str, prompt_tokens: int, qs: Sequence[float],
                               min_trust: float) -> tuple[tuple[float, ...] | None, float]:
        """This replica's TTFT of the deployment, every task, at ascending levels `qs` for a
        prompt of `prompt_tokens` (its TTFT model: `TtftModel.quantiles_at`), and the decayed
        weight behind it; None where the model is not trusted to `min_trust` at that size."""
        state = self._own.get((deployment, ANY, ANY_BUCKET))
        if state is None or state.model is None:
            return None, 0.0
        return state.model.quantiles_at(prompt_tokens, qs, self._clock(), min_trust)

    def _quantiles(self, name: str, deployment: str, task: Task,
                   qs: Sequence[float]) -> tuple[tuple[float, ...] | None, float]:
        state = self._own.get((deployment, task, ANY_BUCKET))
        sketch = state.sketches.get(name) if state is not None else None
        if sketch is None:
            return None, 0.0
        return sketch.quantiles(qs), sketch.count(self._clock())

    def task_summary(self, task: Task) -> KeySummary | None:
        """Task-wide summary across deployments (output tokens, cached answers)."""
        return self.summary((ANY, task, ANY_BUCKET), self._clock())

    def summary(self, key: StatKey, now: float) -> KeySummary | None:
        """The cached summary of `key`; recomputed when it changed and the summary is missing or
        older than the staleness bound, unless a running refresher will (see `StatsConfig`)."""
        cached = self._summaries.get(key)
        if key in self._dirty and (
                cached is None or not now - cached.at < self.config.max_staleness_s):
            cached = self._stale_read(key, cached, now)
        self._wanted.add(key)
        return cached

    def _stale_read(self, key: StatKey, cached: KeySummary | None,
                    now: float) -> KeySummary | None:
        """A changed key whose summary is missing or older than `max_staleness_s`: recompute
        it, unless the refresher runs and decisions keep reading the key (`StatsConfig`)."""
        last = self._refreshed_at
        if cached is not None and last is not None and now - last < self.config.max_staleness_s \
                and (key in self._wanted or key in self._recent):
            return cached
        return self._recompute(key, now)

    def refresh(self, budget_s: float | None = None) -> int:
        """Recompute dirty summaries that decisions read since the last refresh; returns count.

        Then rebuild the levels `view()` served since the last refresh from the summaries now
        current (every key read is clean after this), and drop the others: a first read after
        a pause goes key by key again. With `budget_s`, recomputing stops once it has run that
        long (by the store's clock); the keys it did not reach come first in the next refresh
        (their levels are served as they were until then).
        """
        now = self._clock()
        self._refreshed_at = now
        read = self._keys_read()
        self._recent = read | set(self._backlog.carried)
        self._wanted = set()
        # A carried key that a read has recomputed since is clean: nothing left to do for it.
        self._backlog.carried = [k for k in self._backlog.carried if k in self._dirty]
        recomputed = self._backlog.run(self._dirty & read,
                                       lambda key: self._recompute(key, now), self._clock,
                                       budget_s)
        summaries = self._summaries
        levels: dict[StatKey, _Levels] = {}
        for bucket_key in self._levels_read:
            keys = _level_keys(bucket_key)
            found = (summaries.get(keys[0]), summaries.get(keys[1]), summaries.get(keys[2]))
            levels[bucket_key] = _levels_of(keys, found, now)
        self._levels = levels
        self._levels_read = set()
        return recomputed

    def _keys_read(self) -> set[StatKey]:
        """Keys that decisions read since the last refresh (by `summary()` or `view()`)."""
        read = set(self._wanted)
        for bucket_key in self._levels_read:
            read.update(_level_keys(bucket_key))
        return read

    async def run_refresher(self) -> None:
        """Refresh at the first change (a recorded observation, another replica's state) at
        least `refresh_interval_s` after the previous refresh (run as a task; cancel to stop).
        It never runs on a timer: observations are recorded once an answer is on its way, so
        the refresh rides on the wake-up of the request that recorded, and an idle process is
        not woken at all. Changes that come sooner wait for the next one; if none comes, reads
        recompute a changed summary once it is older than `max_staleness_s` (as without a
        refresher), so a decision misses at most the last interval's observations for at most
        that long."""
        while True:
            await self._wakeup.wait()
            self.refresh(budget_s=REFRESH_BUDGET_S)

    def _recompute(self, key: StatKey, now: float) -> KeySummary | None:
        self._dirty.discard(key)
        self._levels.clear()
        own, remote = self._own.get(key), self._remote_merged.get(key)
        if own is None and remote is None:
            self._summaries.pop(key, None)
            return None
        if remote is None:
            state = own
        else:
            state = remote.copy()
            if own is not None:
                state.merge(own)
        assert state is not None
        summary = state.summarize(now, read_at(key))
        self._summaries[key] = summary
        return summary

    def keys(self) -> tuple[StatKey, ...]:
        return tuple(set(self._own) | set(self._remote_merged))

    @property
    def healthy(self) -> bool:
        return True

    def status(self) -> StoreStatus:
        return StoreStatus(backend="local", healthy=True, detail="in-memory", keys=len(self._own))

    # -- replication hooks (used by RedisStatsStore) -------------------------------------------
    def take_unpushed(self) -> dict[StatKey, KeyState]:
        """Own states changed since the last call (live objects: serialise them at once)."""
        out = {key: self._own[key] for key in self._unpushed}
        self._unpushed = set()
        return out

    def own_states(self) -> Mapping[StatKey, KeyState]:
        return self._own

    def in_flight_counts(self) -> dict[str, int]:
        return self._in_flight.counts()

    @property
    def load(self) -> Mapping[str, int]:
        """This replica's attempts in flight per deployment, live (prefix affinity's load)."""
        return self._in_flight.load

    def mark_unpushed(self, key: StatKey) -> None:
        """Publish `key` again at the next push (after a failed push)."""
        if key in self._own:
            self._unpushed.add(key)

    def update_remote(self, replica: str, states: Mapping[StatKey, KeyState],
                      in_flight: Mapping[str, int]) -> None:
        """Replace the given keys' state from `replica` with its latest published state."""
        self._remote.setdefault(replica, {}).update(states)
        self._remote_in_flight[replica] = dict(in_flight)
        self._rebuild_remote(states)

    def drop_remote(self, replicas: Iterable[str]) -> None:
        """Forget replicas that stopped publishing."""
        touched: set[StatKey] = set()
        for replica in replicas:
            touched |= set(self._remote.pop(replica, {}))
            self._remote_in_flight.pop(replica, None)
        self._rebuild_remote(touched)
        for key in touched:  # the next read recomputes from what is left (the local view)
            self._summaries.pop(key, None)
        self._levels.clear()

    def remote_replicas(self) -> tuple[str, ...]:
        return tuple(self._remote)

    def _rebuild_remote(self, keys: Iterable[StatKey]) -> None:
        for key in keys:
            merged: KeyState | None = None
            for states in self._remote.values():
                state = states.get(key)
                if state is None:
                    continue
                if merged is None:
                    merged = state.copy()
                else:
                    merged.merge(state)
            if merged is None:
                self._remote_merged.pop(key, None)
            else:
                self._remote_merged[key] = merged
            self._dirty.add(key)
        self._wakeup.notify()
