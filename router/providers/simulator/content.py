"""Deterministic answer content: filler text, expect-marker answers and tool-call arguments.

Every function takes its randomness as an argument (a `HashRandom` keyed by the request's
content key), so the same request always gets the same answer. Text is produced as a tuple of
*pieces*, one per output token, so usage counts and streamed chunks agree exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

import orjson

from router.providers.simulator.hashrng import HashRandom
from router.providers.simulator.request import CHARS_PER_TOKEN

WORDS: tuple[str, ...] = (
    "the", "and", "for", "you", "can", "see", "now", "low", "big", "new", "old", "set",
    "use", "run", "may", "one", "two", "six", "ten", "all", "any", "few", "way", "day",
    "key", "map", "sum", "net", "end", "top", "fit", "cap", "log", "tag", "row", "fix",
    "add", "get", "put", "let", "say", "ask", "yes", "not", "our", "its", "per", "via",
    "air", "art", "bay", "box", "car", "cup", "dog", "ear", "egg", "fan", "hat", "ice",
    "jam", "kit", "lab", "mix",
)
# 64 words: one random byte picks a word through a 256-entry table (a test checks the count).
_SPACED_BY_BYTE: tuple[str, ...] = tuple(" " + w for w in WORDS) * 4
CHOICE_LETTERS = "ABCDEFGH"
PLAUSIBLE_STRINGS: dict[str, str] = {
    "city": "Paris",
    "location": "Paris, France",
    "country": "France",
    "date": "2024-05-01",
    "time": "12:00",
    "email": "user@example.com",
    "url": "https://example.com",
    "name": "Ada Lovelace",
    "query": "latest report",
    "id": "abc123",
    "language": "en",
    "currency": "EUR",
}


def filler_pieces(rng: HashRandom, count: int) -> tuple[str, ...]:
    """`count` word pieces (about 4 characters each: a space and a 3-letter word)."""
    if count <= 0:
        return ()
    stream = rng.byte_stream(count)
    first = WORDS[stream[0] & 63].capitalize()
    if count == 1:
        return (first,)
    rest = itemgetter(*stream[1:])(_SPACED_BY_BYTE)
    return (first, *rest) if count > 2 else (first, rest)


@dataclass(frozen=True)
class TokenLogprob:
    """One output token's log probability and its likeliest alternatives, itself first."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


def token_logprobs(pieces: Sequence[str], rng: HashRandom, top: int
                   ) -> tuple[TokenLogprob, ...]:
    """A log probability for each piece, the chosen token's probability drawn in [0.5, 1), and
    its `top` likeliest tokens (at most 20): the piece, then other words, each with half the
    probability the one before it left, so that they come in order and sum to under 1."""
    out = []
    for piece in pieces:
        chosen = 0.5 + 0.5 * rng.random()
        ranked = [(piece, math.log(chosen))]
        left, start = 1.0 - chosen, rng.randint(0, len(WORDS) - 1)
        words = (" " + WORDS[(start + i) % len(WORDS)] for i in range(len(WORDS)))
        for word in words:
            if len(ranked) >= top:
                break
            if word != piece:
                left /= 2
                ranked.append((word, math.log(left)))
        out.append(TokenLogprob(piece, ranked[0][1], tuple(ranked[:top])))
    return tuple(out)


def split_pieces(text: str) -> tuple[str, ...]:
    """A text cut into 4-character pieces (at least one piece, even for an empty text)."""
    if not text:
        return ("",)
    return tuple(text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


def wrong_answer(value: str, rng: HashRandom) -> str:
    """A deterministic answer that differs from `value`, of the same kind when recognisable."""
    stripped = value.strip()
    digits = stripped.lstrip("-")
    if digits.isascii() and digits.isdigit():  # not "¹": str.isdigit accepts superscripts
        return str(int(stripped) + rng.randint(1, 9))
    if len(stripped) == 1 and stripped.upper() in CHOICE_LETTERS[:4]:
        others = [c for c in CHOICE_LETTERS[:4] if c != stripped.upper()]
        return rng.choice(others)
    return f"not {value}" if value else "unknown"


def stop_found(pieces: Sequence[str], stop: Sequence[str]) -> str | None:
    """The stop string that occurs first in the text (the earlier listed at the same place),
    or None: what Anthropic names in `stop_sequence`."""
    text = "".join(pieces)
    found = [(text.find(s), i, s) for i, s in enumerate(stop) if s and s in text]
    return min(found)[2] if found else None


def truncate_at_stop(pieces: Sequence[str], stop: Sequence[str]) -> tuple[str, ...]:
    """Pieces up to (not including) the first occurrence of any stop string."""
    if not stop:
        return tuple(pieces)
    text = "".join(pieces)
    cuts = [text.find(s) for s in stop if s and s in text]
    if not cuts:
        return tuple(pieces)
    kept, length = [], 0
    for piece in pieces:
        if length + len(piece) > min(cuts):
            remainder = piece[: min(cuts) - length]
            if remainder:
                kept.append(remainder)
            break
        kept.append(piece)
        length += len(piece)
    return tuple(kept)


def _plausible_string(name: str, schema: Mapping[str, object], rng: HashRandom) -> str:
    lowered = name.lower()
    for hint, value in PLAUSIBLE_STRINGS.items():
        if hint in lowered:
            return value
    fmt = schema.get("format")
    if fmt == "date":
        return PLAUSIBLE_STRINGS["date"]
    if fmt == "email":
        return PLAUSIBLE_STRINGS["email"]
    return f"{rng.choice(WORDS)} {rng.choice(WORDS)}"


def value_for_schema(name: str, schema: Mapping[str, object], rng: HashRandom) -> object:
    """A plausible JSON value for a JSON-schema fragment (enum, type, nested objects, arrays)."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return object_for_schema(schema, rng)
    if kind == "array":
        items = schema.get("items")
        return [value_for_schema(name, items if isinstance(items, dict) else {}, rng)]
    if kind == "integer":
        return rng.randint(1, 10)
    if kind == "number":
        return round(rng.uniform(1, 100), 1)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _plausible_string(name, schema, rng)


def object_for_schema(schema: Mapping[str, object], rng: HashRandom) -> dict[str, object]:
    """An object with every *required* property filled (all properties when none is required)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = schema.get("required")
    names = [n for n in required if n in properties] if isinstance(required, list) else []
    chosen = names if names else list(properties)
    return {
        n: value_for_schema(n, properties[n] if isinstance(properties[n], dict) else {}, rng)
        for n in chosen
    }


def tool_arguments(parameters_json: str, rng: HashRandom) -> str:
    """Compact JSON arguments for a tool, built from its parameters schema."""
    try:
        schema = orjson.loads(parameters_json)
    except orjson.JSONDecodeError:
        schema = {}
    arguments = object_for_schema(schema, rng) if isinstance(schema, dict) else {}
    return orjson.dumps(arguments).decode()
