"""Simulated model profiles: what one model name on the simulator looks like, and the profile file.

A `ModelProfile` holds every knob of one simulated model (latency distributions, output length,
failure rates, prefix cache, capacity, accuracy, price metadata). A latency distribution is a
lognormal through its p50 and p99 (plus an optional slow TTFT tail) or, where a profile carries
one, a table of quantiles (`quantile_table`) that replaces it. A `ProfileFile` maps model
names to profiles and names an optional fallback profile for unknown model names. Both are
pydantic models with `extra="forbid"`: they are the simulator's boundary (profile files and the
control API). Sampling and request handling live elsewhere (`sampling`, `plan`, `server`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies import yaml_strict
from router.providers.simulator import quantile_table

BUILTIN_PROFILE_PATH = Path(__file__).with_name("default_profiles.json")

CutMode = Literal["abort", "eof"]
QuantileTable = tuple[tuple[float, float], ...]

# The lognormal fields each table stands in for: a change that sets one of them to a new value
# without giving the table drops the table, so `{"ttft_p50_ms": 5000, "ttft_p99_ms": 9000}` on a
# fitted model slows it as it did before tables existed (bench.soak's "slow" fault).
TABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "ttft_quantiles_ms": ("ttft_p50_ms", "ttft_p99_ms", "ttft_tail_share", "ttft_tail_p50_ms",
                          "ttft_tail_max_ms"),
    "tpot_quantiles_ms": ("tpot_p50_ms", "tpot_p99_ms"),
}


class ModelProfile(BaseModel):
    """One simulated model. Times in ms, rates in [0, 1]; the defaults: instant, no faults."""

    # Finite numbers only: an infinite `retry_after_s` was a 500 at every request, an infinite
    # TTFT or error delay a hang never counted as one.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ttft_p50_ms: float = Field(default=0.0, ge=0)
    ttft_p99_ms: float = Field(default=0.0, ge=0)
    ttft_tail_share: float = Field(default=0.0, ge=0, le=1)
    ttft_tail_p50_ms: float = Field(default=0.0, ge=0)
    ttft_tail_max_ms: float = Field(default=0.0, ge=0)
    prefill_ms_per_token: float = Field(default=0.0, ge=0)
    tpot_p50_ms: float = Field(default=0.0, ge=0)
    tpot_p99_ms: float = Field(default=0.0, ge=0)
    # Optional measured shapes, `[[probability, ms], ...]` from 0 to 1: when set, the base TTFT
    # (before prefill) or the TPOT is drawn from the table instead of the fields above.
    ttft_quantiles_ms: QuantileTable | None = None
    tpot_quantiles_ms: QuantileTable | None = None
    output_tokens_p50: int = Field(default=16, ge=1)
    output_tokens_p99: int = Field(default=16, ge=1)
    output_tokens_max: int = Field(default=4096, ge=1)
    tokens_per_chunk: int = Field(default=1, ge=1)
    error_rate_429: float = Field(default=0.0, ge=0, le=1)
    error_rate_500: float = Field(default=0.0, ge=0, le=1)
    error_rate_503: float = Field(default=0.0, ge=0, le=1)
    retry_after_s: float = Field(default=1.0, ge=0, le=86400)
    error_delay_ms: float = Field(default=0.0, ge=0)
    hang_rate: float = Field(default=0.0, ge=0, le=1)
    cut_rate: float = Field(default=0.0, ge=0, le=1)
    cut_after_chunks: int = Field(default=3, ge=0)
    cut_mode: CutMode = "abort"
    accuracy: float = Field(default=1.0, ge=0, le=1)
    prefix_cache_factor: float = Field(default=1.0, ge=0, le=1)
    prefix_cache_ttl_s: float = Field(default=300.0, ge=0)
    prefix_cache_capacity: int = Field(default=4096, ge=0)
    prefix_cache_min_tokens: int = Field(default=0, ge=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    context_window: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)  # a larger max_tokens is a 400
    price_input_per_mtok: float | None = Field(default=None, ge=0)
    price_output_per_mtok: float | None = Field(default=None, ge=0)
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("ttft_quantiles_ms", "tpot_quantiles_ms")
    @classmethod
    def _check_table(cls, table: QuantileTable | None) -> QuantileTable | None:
        if table is not None and (found := quantile_table.problems(table)):
            raise ValueError("quantile table: " + "; ".join(found))
        return table

    @model_validator(mode="after")
    def _check_consistency(self) -> ModelProfile:
        problems: list[str] = []
        pairs = {
            "ttft": (self.ttft_p50_ms, self.ttft_p99_ms),
            "tpot": (self.tpot_p50_ms, self.tpot_p99_ms),
            "output_tokens": (self.output_tokens_p50, self.output_tokens_p99),
        }
        problems.extend(f"{name} p99 is below its p50" for name, (p50, p99) in pairs.items()
                        if p99 < p50)
        failure = self.error_rate_429 + self.error_rate_500 + self.error_rate_503 + self.hang_rate
        if failure > 1.0:
            problems.append("error rates plus hang_rate exceed 1")
        if self.ttft_tail_share > 0 and self.ttft_tail_max_ms < self.ttft_tail_p50_ms:
            problems.append("ttft_tail_max_ms is below ttft_tail_p50_ms")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def patched(self, changes: Mapping[str, object]) -> ModelProfile:
        """A new profile with `changes` applied; `ValidationError` on unknown or bad fields.
        A quantile table whose lognormal fields the changes move (and that they do not set
        themselves) is dropped: see `TABLE_FIELDS`."""
        merged = ModelProfile.model_validate({**self.model_dump(), **dict(changes)})
        stale = {table: None for table, fields in TABLE_FIELDS.items()
                 if table not in changes and getattr(merged, table) is not None
                 and any(getattr(merged, name) != getattr(self, name) for name in fields)}
        return merged.model_copy(update=stale) if stale else merged


def fields_to_restore(profile: Mapping[str, object], changed: Iterable[str]) -> dict[str, object]:
    """The fields of `profile` (a model's JSON, as `GET /control/models` gives it) that undo a
    change of `changed`: those fields, and the quantile tables the change drops (sending the
    old p50/p99 back alone would leave the lognormal where the table was)."""
    names = set(changed)
    names |= {table for table, fields in TABLE_FIELDS.items() if names & set(fields)}
    return {name: profile[name] for name in sorted(names) if name in profile}


class ProfileFile(BaseModel):
    """A set of named profiles; `default_model` (if set) answers for unknown model names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, ModelProfile]
    default_model: str | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _default_exists(self) -> ProfileFile:
        if self.default_model is not None and self.default_model not in self.models:
            raise ValueError(f"default_model {self.default_model!r} is not among the models")
        return self


class ProfileError(Exception):
    """A profile file that cannot be read or does not validate; `problems` holds one line per
    problem, every one of them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def validated(raw: object) -> ProfileFile:
    """`raw` (a parsed file, or a loaded one with changes) as a `ProfileFile`; `ProfileError`
    with one line per field problem, worded as `serve` words its config's (pydantic's own text
    gave three lines a problem, its type codes and a URL among them)."""
    try:
        return ProfileFile.model_validate(raw)
    except ValidationError as exc:
        from policies.loader import validation_problems  # only on this path: no cost to start

        raise ProfileError(validation_problems(exc, ProfileFile, "docs/simulator.md")) from exc


def parse_profile_text(text: str, suffix: str) -> ProfileFile:
    """Parse JSON (`.json`) or YAML (anything else) text into a validated `ProfileFile`."""
    try:
        raw = json.loads(text) if suffix == ".json" else yaml_strict.safe_load(text)
    except yaml.YAMLError as exc:
        from policies.loader import yaml_problem  # a line and column, as the config's

        raise ProfileError([yaml_problem(exc)]) from exc
    except ValueError as exc:
        raise ProfileError([f"not valid JSON: {exc}"]) from exc
    return validated(raw)


def load_profile_file(path: Path | None = None) -> ProfileFile:
    """Load and validate a profile file; `None` loads the built-in profiles. A problem of the
    file names it, as `serve`'s do its config."""
    target = path if path is not None else BUILTIN_PROFILE_PATH
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError([f"cannot read {target}: {exc.strerror or exc}"]) from exc
    try:
        return parse_profile_text(text, target.suffix.lower())
    except ProfileError as exc:
        raise ProfileError([f"{target}: {problem}" for problem in exc.problems]) from exc


def dump_profile_file(profiles: ProfileFile) -> str:
    """Canonical JSON text of a profile file (sorted keys, two-space indent)."""
    return json.dumps(profiles.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
