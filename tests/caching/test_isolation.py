"""Who may read an entry, at the service on both backends: tenant, scopes, locale, data version.

One principal writes an answer; the same request from another tenant (another API key), from a
key of the same tenant with other scopes, in another locale or under another data version
must miss (and reach the upstream), then hit its own entry, while the writer keeps hitting its
own. Answer ids are random per upstream call, so an id tells whose entry was served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.caching.service import KEY_A, KEY_A_ADMIN, KEY_B, Caller, SimStats, unique_messages


@dataclass(frozen=True)
class Principal:
    """Everything that decides who may read: the API key and the scoping headers/metadata."""

    key: str = KEY_A
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


WRITER = Principal(headers={"accept-language": "en-US", "x-slorouter-data-version": "docs-1"})
OTHERS = {
    "other_tenant": Principal(KEY_B, WRITER.headers),
    "same_tenant_other_scopes": Principal(KEY_A_ADMIN, WRITER.headers),
    "other_locale": Principal(headers={"accept-language": "fa-IR",
                                       "x-slorouter-data-version": "docs-1"}),
    "no_locale": Principal(headers={"x-slorouter-data-version": "docs-1"}),
    "other_data_version": Principal(headers={"accept-language": "en-US",
                                             "x-slorouter-data-version": "docs-2"}),
    "no_data_version": Principal(headers={"accept-language": "en-US"}),
    "other_data_version_in_metadata": Principal(
        headers={"accept-language": "en-US"}, params={"metadata": {"data_version": "docs-2"}}),
}


def ask(caller: Caller, messages: list[dict[str, str]], who: Principal) -> Any:
    return caller.chat(messages, key=who.key, headers=who.headers, **who.params)


@pytest.mark.parametrize("other", OTHERS.values(), ids=OTHERS.keys())
def test_entry_is_never_served_to_another_principal_locale_or_data_version(
        caller: Caller, sim_stats: SimStats, other: Principal) -> None:
    """Another tenant, scope set, locale or data version misses the writer's entry."""
    messages = unique_messages("isolation")
    written = ask(caller, messages, WRITER)
    assert written.cache == "miss" and ask(caller, messages, WRITER).cache == "hit"
    before = sim_stats.requests()
    theirs = ask(caller, messages, other)
    assert (theirs.status, theirs.cache) == (200, "miss")
    assert sim_stats.requests() - before == 1
    their_repeat = ask(caller, messages, other)
    mine_again = ask(caller, messages, WRITER)
    assert their_repeat.cache == mine_again.cache == "hit"
    assert their_repeat.body["id"] == theirs.body["id"] != written.body["id"]
    assert mine_again.body["id"] == written.body["id"]


def test_data_version_in_header_or_metadata_reaches_the_same_entry(caller: Caller) -> None:
    """`x-slorouter-data-version: docs-1` and `metadata.data_version: docs-1` are one version."""
    messages = unique_messages("data-version-spelling")
    by_header = caller.chat(messages, headers={"x-slorouter-data-version": "docs-1"})
    by_metadata = caller.chat(messages, metadata={"data_version": "docs-1"})
    assert (by_header.cache, by_metadata.cache) == ("miss", "hit")
    assert by_metadata.body == by_header.body


def test_a_data_version_in_header_and_metadata_that_disagree_is_a_400(caller: Caller) -> None:
    """Neither spelling silently wins (it decides which answers the request may see): two
    different versions are refused; the same version in both is one version."""
    messages = unique_messages("data-version-conflict")
    refused = caller.chat(messages, headers={"x-slorouter-data-version": "docs-1"},
                          metadata={"data_version": "docs-2"})
    assert (refused.status, refused.error) == (400, "BadRequestError")
    agreed = caller.chat(messages, headers={"x-slorouter-data-version": "docs-1"},
                         metadata={"data_version": "docs-1"})
    again = caller.chat(messages, headers={"x-slorouter-data-version": "docs-1"})
    assert (agreed.status, agreed.cache, again.cache) == (200, "miss", "hit")


def test_locale_is_compared_without_case(caller: Caller) -> None:
    """`accept-language: EN-us` reads the entry written under `en-US`."""
    messages = unique_messages("locale-case")
    written = caller.chat(messages, headers={"accept-language": "en-US"})
    read = caller.chat(messages, headers={"accept-language": "EN-us"})
    assert (written.cache, read.cache) == ("miss", "hit")
