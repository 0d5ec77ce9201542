"""The simulator's run-time state: current profiles, counters, prefix caches, capacity limits.

This is the one labelled place of mutable global state of a simulator process. It starts from a
loaded `ProfileFile`, is changed by the control API (`patch`, `upsert`, `reset`) and read by
the request handlers through `resolve`. Clock and RNG are injected.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from router.providers.simulator.capacity import CapacityLimiter
from router.providers.simulator.prefix_cache import PrefixCache
from router.providers.simulator.profile import ModelProfile, ProfileFile
from router.providers.simulator.stats import ModelStats

MAX_DYNAMIC_MODELS = 1000


@dataclass
class ModelRuntime:
    """One model name's live profile and the state that goes with it."""

    profile: ModelProfile
    stats: ModelStats
    limiter: CapacityLimiter
    prefix_cache: PrefixCache


class UnknownModelError(KeyError):
    """A model name that is neither configured nor covered by a default profile."""


class SimulatorState:
    """Everything a simulator process remembers between requests."""

    def __init__(
        self,
        loaded: ProfileFile,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.loaded = loaded
        self.clock = clock
        self.rng = rng
        self.started_at = clock()
        self.default_model = loaded.default_model
        self.models: dict[str, ModelRuntime] = {}
        self.unknown_model_requests = 0
        self._install(loaded.models)

    def _runtime(self, profile: ModelProfile) -> ModelRuntime:
        return ModelRuntime(
            profile, ModelStats(), CapacityLimiter(profile.max_concurrency), PrefixCache(self.clock)
        )

    def _install(self, profiles: Mapping[str, ModelProfile]) -> None:
        self.models = {name: self._runtime(p) for name, p in profiles.items()}

    def resolve(self, name: str) -> ModelRuntime:
        """The runtime of a model name; unknown names use the default profile, if one is set."""
        runtime = self.models.get(name)
        if runtime is not None:
            return runtime
        if self.default_model is None or len(self.models) >= MAX_DYNAMIC_MODELS:
            self.unknown_model_requests += 1
            raise UnknownModelError(name)
        runtime = self._runtime(self.models[self.default_model].profile)
        self.models[name] = runtime
        return runtime

    def patch(self, name: str, changes: Mapping[str, object]) -> ModelProfile:
        """Change some profile fields (raises `UnknownModelError`, `ValidationError`)."""
        runtime = self.models.get(name)
        if runtime is None:
            raise UnknownModelError(name)
        runtime.profile = runtime.profile.patched(changes)
        runtime.limiter.set_limit(runtime.profile.max_concurrency)
        return runtime.profile

    def upsert(self, name: str, profile: ModelProfile) -> None:
        """Add a model, or replace the profile of an existing one (its counters are kept)."""
        runtime = self.models.get(name)
        if runtime is None:
            self.models[name] = self._runtime(profile)
            return
        runtime.profile = profile
        runtime.limiter.set_limit(profile.max_concurrency)

    def reset(self, profiles: bool, stats: bool, prefix_cache: bool) -> None:
        """Return profiles to the loaded file, and/or zero counters, and/or empty prefix caches."""
        if profiles:
            for name in [n for n in self.models if n not in self.loaded.models]:
                if self.models[name].stats.in_flight == 0:
                    del self.models[name]
            for name, profile in self.loaded.models.items():
                self.upsert(name, profile)
            self.default_model = self.loaded.default_model
        for runtime in self.models.values():
            if stats:
                in_flight = runtime.stats.in_flight
                runtime.stats = ModelStats(in_flight=in_flight)
            if prefix_cache:
                runtime.prefix_cache.clear()
        if stats:
            self.unknown_model_requests = 0

    def snapshot(self) -> dict[str, object]:
        """Counters of every model, JSON-ready."""
        now = self.clock()
        return {
            "uptime_s": round(now - self.started_at, 3),
            "unknown_model_requests": self.unknown_model_requests,
            "models": {
                name: rt.stats.snapshot(now, rt.limiter.queued) for name, rt in self.models.items()
            },
        }
