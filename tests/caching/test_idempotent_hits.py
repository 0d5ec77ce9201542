"""Idempotency keys meet the result cache: a hit settles its claim, and the headers that change
what is asked are part of a key's request.

Against both backends (the package's `gateway`). A duplicate's own deadline is short
(`x-slorouter-timeout-ms`), so a claim that a hit left open shows as a 422 "still in progress"
after that wait rather than as a replay.
"""

from __future__ import annotations

import uuid

import pytest

from tests.caching.service import KEY_A, KEY_A_ADMIN, Caller, unique_messages

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
    # refused before the cache was consulted: it says nothing of the cache (it said `bypass`)
    assert "x-slorouter-cache" not in other.headers and other.headers["x-slorouter-policy"]


def test_a_key_is_never_replayed_to_a_caller_with_other_scopes(caller: Caller) -> None:
    """Permission scopes decide who may read an answer, as in the result cache's key: a caller
    of the same tenant with other scopes who sends the same key and body is never replayed the
    other caller's answer (it used to be the admin caller's). A key is the tenant's, as at
    Stripe: the scopes are part of what was asked, so that caller is refused (422
    `idempotency_key_reuse`) rather than run the request again (until 2026-12-06 it got an
    answer of its own, and a client whose API key gained a scope between a side effect and its
    retry ran it twice), and the first caller's retry is still replayed."""
    messages = unique_messages("idem-scopes")
    key = _key()
    admin = caller.chat(messages, key=KEY_A_ADMIN, headers=key)
    reader = caller.chat(messages, key=KEY_A, headers=key)
    assert admin.status == 200 and reader.status == 422, (admin.error, reader.error)
    assert reader.content is None  # nothing of the admin's answer
    again = caller.chat(messages, key=KEY_A_ADMIN, headers={**key, **SHORT_DEADLINE})
    assert again.headers.get("x-slorouter-idempotent-replay") == "true"
    assert again.content == admin.content


def test_a_locale_spelt_otherwise_is_the_same_request_under_a_key(caller: Caller) -> None:
    """`en_US` and `en-us` are one locale, for the key's request as for the cache: the second
    replays the first (it was a 422)."""
    messages = unique_messages("idem-locale")
    key = _key()
    first = caller.chat(messages, headers={**key, "accept-language": "en_US"})
    second = caller.chat(messages, headers={**key, **SHORT_DEADLINE,
                                            "accept-language": "en-us"})
    assert first.status == 200
    assert second.status == 200, second.error
    assert second.headers.get("x-slorouter-idempotent-replay") == "true"
