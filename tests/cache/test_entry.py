"""Entries: only finished answers can be built, and the backend encoding round-trips."""

from __future__ import annotations

import orjson
import pytest

from cache.entry import CachedEntry, EntryVersions, NotCacheable, decode_entry, encode_entry
from tests.cache.helpers import completion_body, scope

VERSIONS = EntryVersions("pv1", "dv1", "gpt-4o-mini")


def test_entry_round_trips_through_backend_bytes() -> None:
    """encode → decode gives back the same entry, body byte for byte."""
    entry = CachedEntry.from_completion(
        completion_body(), VERSIONS, created_at=1234.5, generation_s=0.8
    )
    assert decode_entry(encode_entry(entry)) == entry


@pytest.mark.parametrize("raw", [b"", b"SRC1", b"not an entry", b"SRC1\x00\x00\x00\x05{bad}"])
def test_corrupt_backend_bytes_decode_to_none(raw: bytes) -> None:
    """Foreign or truncated values are a miss, never an exception."""
    assert decode_entry(raw) is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (orjson.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}), "error"),
        (b"{not json", "invalid_json"),
        (orjson.dumps({"object": "chat.completion.chunk", "choices": []}), "not_completion"),
        (orjson.dumps({"object": "chat.completion", "choices": []}), "no_choices"),
        (completion_body("Par", finish_reason=None), "unfinished"),
        (completion_body("", finish_reason="content_filter"), "content_filter"),
        (orjson.dumps({"object": "chat.completion",  # a finish_reason that is not one
                       "choices": [{"message": {"content": "Par"}, "finish_reason": []}]}),
         "unfinished"),
        (orjson.dumps({"object": "chat.completion", "choices": ["x"]}), "unfinished"),
    ],
)
def test_errors_and_unfinished_answers_cannot_become_entries(body: bytes, reason: str) -> None:
    """Error bodies, cut streams and filtered answers raise NotCacheable with a reason."""
    with pytest.raises(NotCacheable) as caught:
        CachedEntry.from_completion(body, VERSIONS, created_at=0.0, generation_s=0.0)
    assert caught.value.reason == reason


def test_versions_stop_holding_when_policy_data_or_model_set_moves() -> None:
    """A version or model-set change makes an entry stale."""
    assert VERSIONS.still_hold(scope())
    assert not VERSIONS.still_hold(scope(policy_version="pv2"))
    assert not VERSIONS.still_hold(scope(data_version="dv2"))
    assert not VERSIONS.still_hold(scope(models=frozenset({"claude-haiku"})))
