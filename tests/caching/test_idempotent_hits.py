"""Idempotency keys meet the result cache: a hit settles its claim, and the headers that change
what is asked are part of a key's request.

Against both backends (the package's `gateway`). A duplicate's own deadline is short
(`x-slorouter-timeout-ms`), so a claim that a hit left open shows as a 422 "still in progress"
after that wait rather than as a replay.
"""

from __future__ import annotations

import uuid

import pytest

from tests.caching.service import Caller, unique_messages

pytestmark = pytest.mark.integration

SHORT_DEADLINE = {"x-slorouter-timeout-ms": "3000"}


def _key() -> dict[str, str]:
    return {"idempotency-key": f"idem-{uuid.uuid4().hex}"}


def test_a_cache_hit_under_a_key_lets_its_duplicates_replay(caller: Caller) -> None:
    """The answer a hit served is the key's answer: a duplicate replays it at once."""
    messages = unique_messages("idem-hit")
    warm = caller.chat(messages)
    key = _key()
    first = caller.chat(messages, headers=key)
    duplicate = caller.chat(messages, headers={**key, **SHORT_DEADLINE})
    streamed = caller.chat(messages, headers={**key, **SHORT_DEADLINE}, stream=True)
    assert (warm.status, warm.cache) == (200, "miss")
    assert (first.status, first.cache) == (200, "hit")
    assert duplicate.status == 200, duplicate.error
    assert duplicate.headers.get("x-slorouter-idempotent-replay") == "true"
    assert duplicate.content == first.content == warm.content
    assert streamed.status == 200 and streamed.content == warm.content
    assert streamed.headers.get("x-slorouter-idempotent-replay") == "true"


@pytest.mark.parametrize("changed", [
    {"x-slorouter-task": "code"},
    {"x-slorouter-risk": "medium"},
    {"x-slorouter-data-version": "docs-2"},
    {"accept-language": "fr"},
])
def test_a_key_reused_with_other_routing_headers_is_a_422(caller: Caller,
                                                          changed: dict[str, str]) -> None:
    """Hints, data version and locale change what is asked: the same key with others is a
    conflict (as with another body), not the first answer replayed; the same ones replay."""
    messages = unique_messages("idem-headers")
    key = _key()
    first = caller.chat(messages, headers=key)
    same = caller.chat(messages, headers=key)
    other = caller.chat(messages, headers={**key, **changed})
    assert first.status == 200
    assert same.status == 200 and same.headers.get("x-slorouter-idempotent-replay") == "true"
    assert other.status == 422, other.headers
