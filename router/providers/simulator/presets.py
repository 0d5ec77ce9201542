"""Ready-made profiles for tests and benchmarks, and a helper to write a profile file.

    instant()                       no latency, 16 output tokens, no faults (overhead baselines)
    steady(ttft_ms=200, tpot_ms=5)  constant latency (p50 = p99), for tests that observe time
    builtin("sim-balanced")             one of the fitted demo models of `default_profiles.json`

Each takes an optional mapping of further profile fields. `write_profile_file` writes a file for
`slorouter sim --profile`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from router.providers.simulator.profile import (
    ModelProfile,
    ProfileFile,
    dump_profile_file,
    load_profile_file,
)


def instant(changes: Mapping[str, object] | None = None) -> ModelProfile:
    """A model that answers at once: zero TTFT and TPOT, 16 output tokens, no faults."""
    return ModelProfile().patched(changes or {})


def steady(
    ttft_ms: float,
    tpot_ms: float = 0.0,
    output_tokens: int = 16,
    changes: Mapping[str, object] | None = None,
) -> ModelProfile:
    """A model with constant TTFT, TPOT and output length (no spread, no faults)."""
    base = {
        "ttft_p50_ms": ttft_ms,
        "ttft_p99_ms": ttft_ms,
        "tpot_p50_ms": tpot_ms,
        "tpot_p99_ms": tpot_ms,
        "output_tokens_p50": output_tokens,
        "output_tokens_p99": output_tokens,
    }
    return ModelProfile().patched({**base, **(changes or {})})


def builtin(name: str, changes: Mapping[str, object] | None = None) -> ModelProfile:
    """A built-in demo model's profile (KeyError if there is no such model)."""
    return load_profile_file().models[name].patched(changes or {})


def builtin_names() -> tuple[str, ...]:
    return tuple(load_profile_file().models)


def profile_file(models: Mapping[str, ModelProfile], default_model: str | None = None
                 ) -> ProfileFile:
    return ProfileFile(models=dict(models), default_model=default_model)


def write_profile_file(path: Path, models: Mapping[str, ModelProfile],
                       default_model: str | None = None) -> Path:
    """Write a JSON profile file (for `slorouter sim --profile PATH`); returns the path."""
    path.write_text(dump_profile_file(profile_file(models, default_model)), encoding="utf-8")
    return path
