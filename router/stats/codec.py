"""Compact serialisation of `KeyState` and statistics keys, for sharing between replicas.

A state becomes orjson bytes holding each sketch's (landmark, zero weight, keys, weights), the
decayed outcome sums and, for deployment keys, the TTFT model's sums and ratio sketch. Keys
encode as `2:<identity>:deployment|task|bucket` (split from the right, so deployment names may
contain `|`), where the identity is a hash of what the deployment calls (`deployment_identity`):
replicas of two config versions share statistics of a name only when it names the same upstream
model at the same address (a deployment re-pointed on a canary used to steer the old replicas
off their own healthy one). A key of the format before (no identity) decodes to None.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, cast

import orjson

from router.stats.decay import Decay, DecayedSums
from router.stats.estimators import SKETCHES, KeyState, StatKey
from router.stats.sketch import DecayedSketch
from router.stats.ttft_model import TtftModel

SketchState = tuple[float | None, float, list[int], list[float]]
SumsState = tuple[float | None, dict[str, float]]


_FORMAT = "2:"


def deployment_identity(model: str, api_base: str | None) -> str:
    """What a deployment name stands for in shared statistics: its provider model string and
    its address, hashed (12 hex digits)."""
    return hashlib.sha256(f"{model}\n{api_base or ''}".encode()).hexdigest()[:12]


def encode_key(key: StatKey, identity: str) -> str:
    return f"{_FORMAT}{identity}:{key[0]}|{key[1]}|{key[2]}"


def decode_key(text: str) -> tuple[StatKey, str] | None:
    """The key and the identity it was written under; None for a key of another format."""
    if not text.startswith(_FORMAT):
        return None
    identity, sep, rest = text[len(_FORMAT):].partition(":")
    if not sep:
        return None
    try:
        deployment, task, bucket = rest.rsplit("|", 2)
        return (deployment, task, int(bucket)), identity
    except ValueError:
        return None


def encode_state(state: KeyState, shift: float = 0.0) -> bytes:
    """Serialise one key's estimators, their landmarks moved by `shift` seconds (this replica's
    clock to the Redis server's: `RedisStatsStore._shared_time`)."""
    doc = {
        "s": {name: _shifted(sketch.to_state(), shift)
              for name, sketch in state.sketches.items()},
        "o": _shifted(state.outcomes.to_state(), shift),
        "m": None if state.model is None
        else [_shifted(state.model.sums.to_state(), shift),
              _shifted(state.model.ratio.to_state(), shift)],
    }
    return orjson.dumps(doc)


def decode_state(blob: bytes, decay: Decay, alpha: float, shift: float = 0.0,
                 latest: float = math.inf) -> KeyState:
    """Rebuild a key's estimators (same half-life and accuracy on every replica), their
    landmarks moved by `shift` seconds (the shared clock to this replica's) and held at
    `latest` (this replica's now) at most: a state from ahead of the clock would outweigh every
    observation made here, 2x per half-life ahead. Sketches this version does not keep (an
    older replica's `e2e` of every answer, `queue`, `cached_e2e`) are skipped; a state from a
    replica without `unstreamed_e2e` (before non-streamed answers were kept apart) decodes
    without it, and its success count without `ok_unstreamed` as all streamed."""
    doc = orjson.loads(blob)
    state = KeyState(decay, alpha, with_model=False, kept=())
    for name, raw in doc["s"].items():
        if name in SKETCHES:
            state.sketches[name] = DecayedSketch.from_state(
                decay, _sketch(raw, shift, latest), alpha)
    state.outcomes = DecayedSums.from_state(decay, _sums(doc["o"], shift, latest))
    if doc["m"] is not None:
        sums = DecayedSums.from_state(decay, _sums(doc["m"][0], shift, latest))
        ratio = DecayedSketch.from_state(decay, _sketch(doc["m"][1], shift, latest), alpha)
        state.model = TtftModel.from_parts(sums, ratio)
    return state


def _shifted(state: tuple[Any, ...], shift: float) -> tuple[Any, ...]:
    """A sketch's or sums' state with its landmark (first, None when empty) moved by `shift`."""
    landmark = state[0]
    return state if landmark is None or not shift else (landmark + shift, *state[1:])


def _landmark(raw: object, shift: float, latest: float) -> float | None:
    if raw is None:
        return None
    return min(float(cast(float, raw)) + shift, latest)


def _sketch(raw: object, shift: float = 0.0, latest: float = math.inf) -> SketchState:
    landmark, zero, keys, weights = cast(list[object], raw)
    return (_landmark(landmark, shift, latest), float(cast(float, zero)),
            [int(k) for k in cast(list[int], keys)], [float(w) for w in cast(list[float], weights)])


def _sums(raw: object, shift: float = 0.0, latest: float = math.inf) -> SumsState:
    landmark, sums = cast(list[object], raw)
    return _landmark(landmark, shift, latest), {
        str(k): float(v) for k, v in cast(dict[str, float], sums).items()}
