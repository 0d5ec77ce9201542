"""The Redis `OutcomeStore`: per-arm counts, reservoirs and windows shared by every replica.

Keys, under `{prefix}:{experiment}:`: `arms` (set of arm names), `stats:{arm}` (hash of
`{metric}:n|s|q`: count, sum and sum of squares on the analysis scale), `res:{arm}:{metric}`
(reservoir list), `win:{arm}:{metric}` (recent values, newest first), `halts` (hash arm → JSON),
`assigned` (hash arm → units counted for the SRM check), `barred` (hash arm → requests the
policy barred the arm's route from) and `unit:{hash}` (a unit's marker, kept 30 days, or the
exposures' TTL for `unit: request`).
Per request id, `{prefix}:req:{id}` remembers the arm (and the treatment version it was
served under: feedback for an earlier version is not found) and `{prefix}:fb:{id}:{metric}` marks a
received feedback value, both with a TTL. One Lua script updates all metrics of an outcome
atomically, so concurrent replicas never over-fill a reservoir; one MULTI/EXEC transaction reads
a snapshot, so it never mixes two instants. The client is injected.
Every write's reply goes to `writes` (`router.redis_writes`), which `/readyz` reads: a Redis
that answers reads but refuses writes loses every outcome.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, TypeVar

import orjson
import redis.asyncio as aioredis

from router.experiments.outcomes import (
    RESERVOIR_SIZE,
    WINDOW_SIZE,
    ArmData,
    ExperimentData,
    Exposure,
    Feedback,
    Halt,
    MetricSamples,
    Outcome,
    analysis_value,
)
from router.logs import event
from router.redis_writes import WriteHealth

log = logging.getLogger("slorouter.experiments")

T = TypeVar("T")

EXPOSURE_TTL_S: Final[int] = 7 * 24 * 3600
# A user's or tenant's SRM marker: kept long enough to count a returning unit once over a
# typical experiment, not for ever (a marker is ~100 bytes of Redis per unit). A unit seen
# again after it is counted again, on the arm it hashes to, so the shares stay unbiased.
UNIT_MARKER_TTL_S: Final[int] = 30 * 24 * 3600
# Transactions a snapshot may take to read an arm or metric that appeared since the last one:
# the first finds it, the second reads it (a full snapshot of a brand-new arm: both at once).
_SNAPSHOT_TRIES: Final[int] = 3

# KEYS: a feedback marker (unread when ARGV[1] is 0), arms set, stats hash, then (reservoir,
# window) per metric. ARGV: the marker's TTL in s (0: no marker), arm, reservoir size, window
# size, then (metric, raw, scaled, scaled², u) per metric. With a marker, the values are added
# only if it was not set yet, in the same step (-1 when it was): set apart, a failed add after
# the marker lost the value for good, its retry finding the marker.
_RECORD_LUA: Final[str] = """
local once = tonumber(ARGV[1])
if once > 0 and not redis.call('SET', KEYS[1], '1', 'NX', 'EX', once) then return -1 end
redis.call('SADD', KEYS[2], ARGV[2])
local cap = tonumber(ARGV[3])
local win = tonumber(ARGV[4])
local k = (#ARGV - 4) / 5
for i = 0, k - 1 do
  local a = 5 + i * 5
  local metric, raw = ARGV[a], ARGV[a + 1]
  local n = redis.call('HINCRBY', KEYS[3], metric .. ':n', 1)
  redis.call('HINCRBYFLOAT', KEYS[3], metric .. ':s', ARGV[a + 2])
  redis.call('HINCRBYFLOAT', KEYS[3], metric .. ':q', ARGV[a + 3])
  local res, recent = KEYS[4 + 2 * i], KEYS[5 + 2 * i]
  if n <= cap then
    redis.call('RPUSH', res, raw)
  else
    local slot = math.floor(tonumber(ARGV[a + 4]) * n)
    if slot < cap then redis.call('LSET', res, slot, raw) end
  end
  redis.call('LPUSH', recent, raw)
  redis.call('LTRIM', recent, 0, win - 1)
end
return k
"""

# KEYS: the unit's marker, the assigned hash. ARGV: arm, TTL in s (0: none). Counted once.
_COUNT_UNIT_LUA: Final[str] = """
local ttl = tonumber(ARGV[2])
local new
if ttl > 0 then
  new = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ttl)
else
  new = redis.call('SET', KEYS[1], ARGV[1], 'NX')
end
if new then redis.call('HINCRBY', KEYS[2], ARGV[1], 1) end
return new and 1 or 0
"""

# KEYS: one list. ARGV: start, stop. Its values as one space-separated string: redis-py's
# parser takes about 2 us a reply element, so a full snapshot's 90,000 values read one by one
# held the event loop for 0.2 s; one string a list is parsed at once.
_JOINED_LUA: Final[str] = """
return table.concat(redis.call('LRANGE', KEYS[1], ARGV[1], ARGV[2]), ' ')
"""


def _floats(joined: bytes | str) -> tuple[float, ...]:
    return tuple(float(v) for v in _text(joined).split())


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


class RedisOutcomeStore:
    """An `OutcomeStore` in Redis, for several replicas of the service."""

    shared = True  # every replica's: its halts must be read before an arm is served

    def __init__(
        self,
        client: aioredis.Redis,
        rng: random.Random,
        *,
        prefix: str = "slorouter:exp",
        reservoir_size: int = RESERVOIR_SIZE,
        window_size: int = WINDOW_SIZE,
        exposure_ttl_s: int = EXPOSURE_TTL_S,
        versions: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._rng = rng
        self._prefix = prefix
        # experiment → its treatment version (`ExperimentSpec.treatment_version`): an
        # experiment whose arms changed keeps its data under new keys, not the old route's.
        self._versions = dict(versions or {})
        self._sizes = (reservoir_size, window_size)
        self._ttl = exposure_ttl_s
        self._script = client.register_script(_RECORD_LUA)
        self._joined = client.register_script(_JOINED_LUA)
        self._count_unit = client.register_script(_COUNT_UNIT_LUA)
        # experiment → the arms and metrics its last snapshot saw: what the next one reads.
        self._seen: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.writes = WriteHealth("experiments")

    @property
    def client(self) -> aioredis.Redis:
        """The pooled client: `/readyz` checks Redis through it (no connection of its own)."""
        return self._client

    async def _written(self, command: Awaitable[T]) -> T:
        """`command`'s reply, its outcome told to `writes`."""
        try:
            reply = await command
        except (aioredis.RedisError, OSError) as exc:
            self.writes.failed(exc)
            raise
        self.writes.accepted()
        return reply

    def _key(self, experiment: str, *parts: str) -> str:
        version = self._versions.get(experiment)
        scoped = experiment if version is None else f"{experiment}@{version}"
        return ":".join((self._prefix, scoped, *parts))

    async def _add(self, experiment: str, arm: str, values: tuple[tuple[str, float], ...],
                   once: str | None = None) -> bool:
        """Add the values to the arm; with `once` (a marker key), only if the marker was not
        set yet. Whether they were added."""
        arms = self._key(experiment, "arms")
        keys = [once if once is not None else arms, arms, self._key(experiment, "stats", arm)]
        args: list[str | int | float] = [self._ttl if once is not None else 0, arm,
                                         *self._sizes]
        for metric, value in values:
            keys += [self._key(experiment, "res", arm, metric),
                     self._key(experiment, "win", arm, metric)]
            scaled = analysis_value(metric, value)
            args += [metric, repr(value), repr(scaled), repr(scaled * scaled),
                     repr(self._rng.random())]
        return int(await self._written(self._script(keys=keys, args=args))) >= 0

    async def record(self, outcome: Outcome) -> None:
        await self._add(outcome.experiment, outcome.arm, outcome.values())
        if outcome.answered:
            await self.expose(outcome.request_id, Exposure(outcome.experiment, outcome.arm))

    async def expose(self, request_id: str, exposure: Exposure) -> None:
        payload = orjson.dumps({"experiment": exposure.experiment, "arm": exposure.arm,
                                "version": self._versions.get(exposure.experiment)})
        await self._written(self._client.set(f"{self._prefix}:req:{request_id}", payload,
                                             ex=self._ttl))

    async def exposure(self, request_id: str) -> Exposure | None:
        raw = await self._client.get(f"{self._prefix}:req:{request_id}")
        if raw is None:
            return None
        try:
            data = orjson.loads(raw)
            experiment, arm = str(data["experiment"]), str(data["arm"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            # Another version's shape, or a hand edit: no exposure this version can credit
            # (a 404 for its feedback, not a 503 "store unavailable" clients retry forever).
            event(log, "experiment_exposure_unreadable", logging.WARNING)
            return None
        # A request of an earlier treatment (an arm's route or share changed since): its
        # feedback is not the current arm's, whose data started afresh under the new version.
        # (An exposure written before versions were stored carries none: taken as current.)
        version = data.get("version")
        if version is not None and version != self._versions.get(experiment):
            return None
        return Exposure(experiment=experiment, arm=arm)

    async def record_feedback(self, exposure: Exposure, feedback: Feedback) -> bool:
        marker = f"{self._prefix}:fb:{feedback.request_id}:{feedback.metric}"
        return await self._add(exposure.experiment, exposure.arm,
                               ((feedback.metric, feedback.value),), once=marker)

    async def halt(self, experiment: str, halt: Halt) -> bool:
        payload = orjson.dumps({
            "arm": halt.arm, "guardrail": halt.guardrail, "reason": halt.reason,
            "at_sample": halt.at_sample, "observed": halt.observed,
            "threshold": halt.threshold, "at": halt.at.isoformat(),
        })
        added = await self._written(
            self._client.hsetnx(self._key(experiment, "halts"), halt.arm, payload))
        return bool(added)

    async def count_unit(self, experiment: str, arm: str, unit_key: str,
                         expires: bool) -> None:
        ttl = self._ttl if expires else UNIT_MARKER_TTL_S
        await self._written(self._count_unit(keys=[self._key(experiment, "unit", unit_key),
                                                   self._key(experiment, "assigned")],
                                             args=[arm, ttl]))

    async def count_barred(self, experiment: str, arm: str) -> None:
        await self._written(self._client.hincrby(self._key(experiment, "barred"), arm, 1))

    async def snapshot(self, experiment: str,
                       windows: Mapping[str, int] | None = None) -> ExperimentData:
        """The arms, each arm's counts and values, the halts, the SRM and barred counts, read
        in one MULTI/EXEC transaction: a snapshot of one instant. Read in separate calls (an arm's
        counts, then its values), the outcomes written between the reads slipped in, so a
        guardrail's window held values its count did not. A transaction reads only the keys
        it names: those of the arms and metrics the last snapshot saw. When it finds an arm or
        metric it did not read (a new arm, a first feedback value), it is read again with it;
        each appears once in an experiment's life, so that is rare."""
        seen_arms, seen_metrics = self._seen.get(experiment, (frozenset(), frozenset()))
        for _ in range(_SNAPSHOT_TRIES):
            wanted = frozenset(windows) if windows is not None else seen_metrics
            read = await self._read(experiment, seen_arms, wanted, windows)
            seen_arms, seen_metrics = read.members, seen_metrics | read.metric_names()
            self._seen[experiment] = (seen_arms, seen_metrics)
            if read.complete():
                break
        # After the last try, what was read is still one instant: only an arm or metric that
        # first appeared during those tries is left out.
        return read.data(experiment)

    async def _read(self, experiment: str, arms: frozenset[str], metrics: frozenset[str],
                    windows: Mapping[str, int] | None) -> _Read:
        """One transaction: the arms set, the halts, the SRM and barred counts (full snapshot
        only), and for each of `arms` its stats hash and each of `metrics`' reservoir and
        window (full) or newest `windows[metric]` values. Reservoirs and windows are parsed
        from one string a list: parsing every reservoir and window (90,000 values for two
        arms) value by value held the event loop for about 0.2 s per snapshot."""
        arm_names, metric_names = sorted(arms), sorted(metrics)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.smembers(self._key(experiment, "arms"))
            pipe.hgetall(self._key(experiment, "halts"))
            if windows is None:
                pipe.hgetall(self._key(experiment, "assigned"))
                pipe.hgetall(self._key(experiment, "barred"))
            for arm in arm_names:
                pipe.hgetall(self._key(experiment, "stats", arm))
                for metric in metric_names:
                    recent = self._key(experiment, "win", arm, metric)
                    if windows is None:
                        await self._joined(keys=[self._key(experiment, "res", arm, metric)],
                                           args=[0, -1], client=pipe)
                        await self._joined(keys=[recent], args=[0, -1], client=pipe)
                    else:  # newest first: the first n are the last n values
                        await self._joined(keys=[recent], args=[0, windows[metric] - 1],
                                           client=pipe)
            replies = iter(await pipe.execute())
        members = frozenset(_text(a) for a in next(replies))
        halts = tuple(sorted((_halt(arm, v) for arm, v in next(replies).items()),
                             key=lambda h: h.at if h.at.tzinfo else h.at.replace(tzinfo=UTC)))
        assigned, barred = (({_text(arm): int(n) for arm, n in next(replies).items()},
                             {_text(arm): int(n) for arm, n in next(replies).items()})
                            if windows is None else ({}, {}))
        stats: dict[str, dict[str, float]] = {}
        lists: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {}
        for arm in arm_names:
            stats[arm] = {_text(k): float(v) for k, v in next(replies).items()}
            for metric in metric_names:
                reservoir = _floats(next(replies)) if windows is None else ()
                lists[arm, metric] = (reservoir, _floats(next(replies))[::-1])
        return _Read(members, stats, lists, halts, assigned, barred, metrics, windows is None)


@dataclass(frozen=True, slots=True)
class _Read:
    """The replies of one snapshot transaction. `stats` has the arms read, `lists` their
    (reservoir, recent oldest first) of each metric read (`metrics`)."""

    members: frozenset[str]
    stats: Mapping[str, Mapping[str, float]]
    lists: Mapping[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]]
    halts: tuple[Halt, ...]
    assigned: Mapping[str, int]
    barred: Mapping[str, int]
    metrics: frozenset[str]
    full: bool

    def metric_names(self) -> frozenset[str]:
        """The metrics recorded on any arm read."""
        return frozenset().union(*map(_recorded, self.stats.values()))

    def complete(self) -> bool:
        """Every arm in the set was read and, in a full snapshot, every metric recorded on
        them (a guardrail snapshot reads the metrics it names only)."""
        read_all_arms = self.members <= self.stats.keys()
        return read_all_arms and (not self.full or self.metric_names() <= self.metrics)

    def data(self, experiment: str) -> ExperimentData:
        """The snapshot: the arms in the set that were read, each with its metrics read."""
        arms: dict[str, ArmData] = {}
        for arm in sorted(self.members & self.stats.keys()):
            stats = self.stats[arm]
            names = _recorded(stats) & self.metrics
            arms[arm] = ArmData(arm=arm, metrics={
                metric: MetricSamples(
                    count=int(stats[f"{metric}:n"]), total=stats.get(f"{metric}:s", 0.0),
                    total_sq=stats.get(f"{metric}:q", 0.0),
                    reservoir=self.lists[arm, metric][0], recent=self.lists[arm, metric][1])
                for metric in sorted(names)})
        return ExperimentData(experiment=experiment, arms=arms, halts=self.halts,
                              assigned=self.assigned, barred=self.barred)


def _recorded(stats: Mapping[str, float]) -> frozenset[str]:
    """The metrics an arm's stats hash has (its fields are `metric:n`, `metric:s`, ...)."""
    return frozenset(field.rsplit(":", 1)[0] for field in stats)


def _halt(field: bytes | str, raw: bytes | str) -> Halt:
    """The halt stored for `arm`. One this version cannot read (another version's shape, a hand
    edit) still halts its arm, named as unreadable: raising, it failed every guardrail pass of
    every experiment, so no new halt was enforced anywhere (the rollout audit)."""
    arm = field.decode("utf-8", "replace") if isinstance(field, bytes) else field
    try:
        data = orjson.loads(raw)
        return Halt(
            arm=str(data["arm"]), guardrail=str(data["guardrail"]), reason=str(data["reason"]),
            at_sample=int(data["at_sample"]), observed=float(data["observed"]),
            threshold=float(data["threshold"]), at=datetime.fromisoformat(str(data["at"])),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        event(log, "experiment_halt_unreadable", logging.WARNING, arm=arm)
        return Halt(arm=arm, guardrail="unknown", reason="a halt this version cannot read "
                    "(kept: its arm stays halted)", at_sample=0, observed=math.nan,
                    threshold=math.nan, at=datetime.fromtimestamp(0, UTC))
