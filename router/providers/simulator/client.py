"""A small synchronous client of a running simulator's control API, for tests and benchmarks.

    control = SimulatorControl("http://127.0.0.1:8001")
    control.set_profile("sim-balanced", {"ttft_p50_ms": 2000, "ttft_p99_ms": 2500})
    control.model_stats("sim-balanced")["cancellations"]

Errors from the simulator raise `httpx.HTTPStatusError` (422 for an unknown profile field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import httpx

from router.providers.simulator.profile import ModelProfile


class SimulatorControl:
    """Drive `/control/...` of one simulator process."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SimulatorControl:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        response.raise_for_status()
        return cast(dict[str, Any], response.json())

    def set_profile(self, model: str, changes: Mapping[str, object]) -> dict[str, Any]:
        """Change some profile fields of a model; returns its new profile."""
        response = self._client.post(f"/control/models/{model}", json=dict(changes))
        return cast(dict[str, Any], self._json(response)["profile"])

    def add_model(self, name: str, profile: ModelProfile | Mapping[str, object] | None = None,
                  base: str | None = None) -> dict[str, Any]:
        """Add (or replace) a model, optionally starting from another model's profile."""
        fields = profile.model_dump(mode="json") if isinstance(profile, ModelProfile) else (
            dict(profile or {}))
        body = {"name": name, "profile": fields, "base": base}
        return cast(dict[str, Any], self._json(self._client.post("/control/models", json=body))
                    ["profile"])

    def reset(self, profiles: bool = True, stats: bool = True, prefix_cache: bool = True
              ) -> None:
        """Back to the loaded profiles, zero counters and empty prefix caches (by default)."""
        body = {"profiles": profiles, "stats": stats, "prefix_cache": prefix_cache}
        self._json(self._client.post("/control/reset", json=body))

    def stats(self) -> dict[str, Any]:
        return self._json(self._client.get("/control/stats"))

    def model_stats(self, model: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.stats()["models"][model])

    def profiles(self) -> dict[str, Any]:
        return self._json(self._client.get("/control/models"))
