"""What the result cache stores: one complete chat.completion body and the versions behind it.

`CachedEntry.from_completion` is the only way to build an entry from a provider response, and it
refuses anything that is not a finished answer (`NotCacheable`, with a reason): error bodies,
non-`chat.completion` objects, choices without a finish reason (a cut stream), content-filtered
answers. `encode_entry`/`decode_entry` turn an entry into backend bytes and back; a corrupt or
foreign value decodes to None (a miss), never an exception.

What does not live here: backends, TTL, lookups (`cache.result`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import orjson

from cache.keys import CacheScope

FINISHED: Final[frozenset[str]] = frozenset({"stop", "length", "tool_calls", "function_call"})
_MAGIC: Final = b"SRC1"
_HEADER_LEN: Final = struct.Struct(">I")


class NotCacheable(ValueError):
    """A response that must not be written; `reason` is a short metric label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class EntryVersions:
    """The versions an answer was produced under.

    `model` is the policy's model name that answered (a member of `CacheScope.models`), not the
    provider's dated model string from the response body.
    """

    policy_version: str
    data_version: str | None
    model: str

    @classmethod
    def of(cls, scope: CacheScope, model: str) -> EntryVersions:
        """The versions of a scope, for the model that answered."""
        return cls(scope.policy_version, scope.data_version, model)

    def still_hold(self, scope: CacheScope) -> bool:
        """False when the policy, the data or the model set moved on since the write."""
        return (
            self.policy_version == scope.policy_version
            and self.data_version == scope.data_version
            and (not scope.models or self.model in scope.models)
        )


@dataclass(frozen=True, slots=True)
class CachedEntry:
    """A finished chat.completion body (bytes, as sent to the client) with its provenance."""

    body: bytes
    versions: EntryVersions
    created_at: float
    generation_s: float
    deployment: str = ""  # the deployment that produced the answer (reported on hits)

    @classmethod
    def from_completion(
        cls, body: bytes, versions: EntryVersions, *, created_at: float, generation_s: float,
        deployment: str = "",
    ) -> CachedEntry:
        """An entry for a finished answer; raises `NotCacheable` for anything else."""
        check_completion(body)
        return cls(body, versions, created_at, generation_s, deployment)


def check_completion(body: bytes) -> None:
    """Raise `NotCacheable` unless `body` is a finished, unfiltered chat.completion."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotCacheable("invalid_json") from exc
    if not isinstance(parsed, dict) or "error" in parsed:
        raise NotCacheable("error")
    if parsed.get("object") != "chat.completion":
        raise NotCacheable("not_completion")
    choices = parsed.get("choices")
    if not isinstance(choices, list) or not choices:
        raise NotCacheable("no_choices")
    for choice in choices:
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        if finish == "content_filter":
            raise NotCacheable("content_filter")
        if not isinstance(finish, str) or finish not in FINISHED:
            raise NotCacheable("unfinished")


def encode_entry(entry: CachedEntry) -> bytes:
    """Backend bytes: magic, header length, JSON header, then the body verbatim."""
    header = orjson.dumps(
        {
            "p": entry.versions.policy_version,
            "d": entry.versions.data_version,
            "m": entry.versions.model,
            "c": entry.created_at,
            "g": entry.generation_s,
            "a": entry.deployment,
        }
    )
    return b"".join((_MAGIC, _HEADER_LEN.pack(len(header)), header, entry.body))


def decode_entry(raw: bytes) -> CachedEntry | None:
    """The entry in `raw`, or None when the bytes are not an entry of this format."""
    start = len(_MAGIC) + _HEADER_LEN.size
    if len(raw) < start or not raw.startswith(_MAGIC):
        return None
    (size,) = _HEADER_LEN.unpack_from(raw, len(_MAGIC))
    try:
        header = orjson.loads(raw[start : start + size])
        versions = EntryVersions(str(header["p"]), _opt_str(header["d"]), str(header["m"]))
        created_at, generation_s = float(header["c"]), float(header["g"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    deployment = str(header.get("a") or "")
    return CachedEntry(raw[start + size :], versions, created_at, generation_s, deployment)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
