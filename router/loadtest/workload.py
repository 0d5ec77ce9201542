"""Workload mixes: which requests a benchmark sends, drawn up front from a seed.

A mix file (JSON, validated by `WorkloadMix`) names a prompt pool (JSON Lines with `text`,
`lang`, `length`) and weighted request classes: which languages and prompt lengths, how many
output tokens, streaming or not, temperature, and `repeat_pool` (draw from a small fixed set of
prompts at temperature 0, so that repeats can be cache hits). `plan_requests` is pure: the same
mix, count and seed give the same bodies in the same order for every target.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from router.validation import one_line

Length = Literal["short", "median", "long"]
Lang = Literal["en", "fa", "mixed"]


class Prompt(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    text: str
    lang: Lang
    length: Length


class RequestClass(BaseModel):
    # strict: a weight of "1" or true, a stream of "yes", is a typo to report, not a value
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    weight: float = Field(gt=0, allow_inf_nan=False)  # an infinite weight has no share
    lang: tuple[Lang, ...] = ("en",)
    length: tuple[Length, ...] = ("short",)
    max_tokens: int = Field(default=64, ge=1)
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    repeat_pool: int | None = Field(default=None, ge=1)


class WorkloadMix(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    prompts: str  # path of the prompt pool, relative to the mix file
    model: str = "auto"
    classes: tuple[RequestClass, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> WorkloadMix:
        names = [c.name for c in self.classes]
        if len(names) != len(set(names)):
            raise ValueError("request class names must be unique")
        if not math.isfinite(sum(c.weight for c in self.classes)):
            raise ValueError("the classes' weights must add up to a finite number")
        return self


@dataclass(frozen=True, slots=True)
class Workload:
    mix: WorkloadMix
    pool: tuple[Prompt, ...]


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    cls: str
    stream: bool
    body: bytes


def load_workload(path: Path) -> Workload:
    """Read a mix file and its prompt pool; every class must find at least one prompt. A file
    that does not validate is a `ValueError` of one line: the file (and line), field, problem."""
    try:
        mix = WorkloadMix.model_validate_json(_without_bom(path.read_bytes()))
    except ValidationError as exc:
        raise ValueError(f"{path}: {one_line(exc)}") from None
    pool_path = (path.parent / mix.prompts).resolve()
    prompts: list[Prompt] = []
    for number, line in enumerate(_without_bom(pool_path.read_bytes()).splitlines(), start=1):
        if line.strip():
            try:
                prompts.append(Prompt.model_validate_json(line))
            except ValidationError as exc:
                raise ValueError(f"{pool_path}:{number}: {one_line(exc)}") from None
    pool = tuple(prompts)
    missing = [c.name for c in mix.classes if not _candidates(pool, c)]
    if missing:
        raise ValueError(f"{path}: no prompt in {pool_path} fits class(es) {', '.join(missing)}")
    return Workload(mix, pool)


def _without_bom(data: bytes) -> bytes:
    """The bytes without a leading UTF-8 byte order mark (some Windows editors write one; JSON
    forbids it, and the parser's "expected value at line 1 column 1" did not say why)."""
    return data.removeprefix(b"\xef\xbb\xbf")


def _candidates(pool: tuple[Prompt, ...], cls: RequestClass) -> list[Prompt]:
    return [p for p in pool if p.lang in cls.lang and p.length in cls.length]


def _body(model: str, cls: RequestClass, prompt: Prompt, temperature: float | None) -> bytes:
    body: dict[str, object] = {"model": model, "max_tokens": cls.max_tokens,
                               "messages": [{"role": "user", "content": prompt.text}]}
    if cls.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if temperature is not None:
        body["temperature"] = temperature
    return orjson.dumps(body)


def plan_requests(workload: Workload, count: int, seed: int,
                  model: str | None = None) -> list[PlannedRequest]:
    """`count` requests drawn by class weight; repeat classes reuse a fixed small pool. The
    requests of one prompt, class and temperature share one body (a million-request plan
    holds the pool's bodies once, not a million copies)."""
    rng = random.Random(seed)
    chosen_model = model if model is not None else workload.mix.model
    classes = workload.mix.classes
    weights = [c.weight for c in classes]
    candidates = {c.name: _candidates(workload.pool, c) for c in classes}
    pools = {c.name: candidates[c.name][: c.repeat_pool] for c in classes if c.repeat_pool}
    planned: dict[tuple[str, int, float | None], PlannedRequest] = {}
    requests = []
    for cls in rng.choices(classes, weights=weights, k=count):
        temperature: float | None
        if cls.repeat_pool:
            prompt, temperature = rng.choice(pools[cls.name]), 0.0
        else:
            prompt, temperature = rng.choice(candidates[cls.name]), cls.temperature
        key = (cls.name, id(prompt), temperature)
        if key not in planned:
            planned[key] = PlannedRequest(cls.name, cls.stream,
                                          _body(chosen_model, cls, prompt, temperature))
        requests.append(planned[key])
    return requests
