"""Which declared tools commit side effects, judged from their names and descriptions.

A tool name is read verb-first (`verb_object`, `verbObject`, `VerbObject`, after a namespace
such as `library.`, `Hotels_2_`, `mcp__shop__` or `shop-`): a name whose every clause opens
with a read verb reads (`lookup_order`), whatever nouns follow; otherwise a consequential word
in the name commits, a mutating one does not, and a name with neither is judged by its
description's first words.
Pure functions of short strings (no pass over the prompt). The `side_effects` signal, risk and
the model's tool features live elsewhere (`detectors`, `risk`, `features`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

# Tool-name words that commit something outside the conversation (money, messages, bookings,
# deletions). Words that only change a setting (set, add, update) do not raise risk by
# themselves; they still reach the model as features.
CONSEQUENTIAL_VERBS: Final[frozenset[str]] = frozenset(
    [
        "send",
        "pay",
        "payment",
        "transfer",
        "wire",
        "book",
        "reserve",
        "reservation",
        "cancel",
        "delete",
        "remove",
        "purchase",
        "buy",
        "order",
        "trade",
        "sell",
        "post",
        "publish",
        "share",
        "email",
        "mail",
        "sms",
        "message",
        "refund",
        "charge",
        "withdraw",
        "deposit",
        "submit",
        "execute",
        "exec",
        "drop",
        "destroy",
        "revoke",
        "terminate",
        "transfer",
        "checkout",
        "tweet",
        "invoice",
    ]
)
MUTATING_VERBS: Final[frozenset[str]] = frozenset(
    [
        "create",
        "update",
        "add",
        "set",
        "schedule",
        "edit",
        "modify",
        "move",
        "write",
        "insert",
        "rename",
        "enable",
        "disable",
        "register",
        "assign",
        "upload",
        "save",
        "put",
        "patch",
        "replace",
        "change",
        "start",
        "stop",
        "restart",
        "open",
        "close",
    ]
)
# Tool-name verbs that only read or compute: a tool whose name opens with one reads whatever
# nouns follow (`lookup_order`, `check_payment_status`, `fetchInvoice`). Verbs that may act are
# left out on purpose: `track` (analytics events), `download`/`export` (write files), `test`.
READ_VERBS: Final[frozenset[str]] = frozenset(
    [
        "get",
        "lookup",
        "look",
        "search",
        "find",
        "list",
        "fetch",
        "read",
        "query",
        "check",
        "show",
        "view",
        "display",
        "describe",
        "count",
        "retrieve",
        "inspect",
        "preview",
        "estimate",
        "quote",
        "validate",
        "verify",
        "calculate",
        "compute",
        "compare",
        "convert",
        "browse",
        "analyze",
        "analyse",
    ]
)
# Words that start a new clause in a name (`validate_and_submit`, `get_or_create_user`): each
# clause has its own verb, and a name reads only when every clause does.
_CLAUSE_JOINERS: Final[frozenset[str]] = frozenset(["and", "then", "or"])
# Read verbs that change meaning with the next word: `check_in` registers, `check_out` pays.
_PHRASAL_VERBS: Final[dict[tuple[str, str], str]] = {
    ("check", "in"): "checkin",
    ("check", "out"): "checkout",
}
# What separates a tool name's namespace from its action: `library.search_book`,
# `acl_api.AclApi.retrieve_projects`, the Schema-Guided Dialogue style `Hotels_2_SearchHouse`,
# MCP gateways' `mcp__shop__get_order_status` and `shop__get_order_status`, and `shop-` before
# a snake or camel case action (`shop-get_order_status`, `shop-getOrderStatus`). Read whole, the
# server name was the verb: 7 of 157 read-only names (`get_order_status`, `get_invoice`, ...)
# became side-effecting under a namespace. A dash before a plain word is kebab case, one name
# read from its first word as before: `get-order-status` is not the action `status`.
_NAMESPACE: Final = re.compile(r"\.|__|_\d+_|-(?=[^-]*(?:_|[a-z][A-Z]))")
_IDENT_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_DESC_WORD: Final = re.compile(r"[a-z]+")


def identifier_words(name: str) -> tuple[str, ...]:
    """Lower-case words of a snake_case, camelCase or PascalCase identifier."""
    return tuple(w.lower() for w in _IDENT_WORD.findall(name))


def name_verbs(name: str) -> tuple[str, ...]:
    """The verb of each clause of a tool name's action part (its last namespace segment): the
    first word, and each word after `and`/`then`/`or`. `validate_and_submit` gives
    (`validate`, `submit`), `Hotels_2_SearchHouse` gives (`search`,); `check_in` gives
    (`checkin`,)."""
    words = identifier_words(_NAMESPACE.split(name)[-1])
    verbs: list[str] = []
    starts_clause = True
    for i, word in enumerate(words):
        if word in _CLAUSE_JOINERS:
            starts_clause = True
        elif starts_clause:
            following = words[i + 1] if i + 1 < len(words) else ""
            verbs.append(_PHRASAL_VERBS.get((word, following), word))
            starts_clause = False
    return tuple(verbs)


def _is_consequential_word(word: str) -> bool:
    return word in CONSEQUENTIAL_VERBS or word.rstrip("s") in CONSEQUENTIAL_VERBS


def tool_is_consequential(name: str, description: str = "") -> bool:
    """True when a tool, by its name or its description's first words, commits a side effect.

    Names are verb-first: when every clause of the name opens with a read verb, the tool reads
    (`lookup_order`), unless its description opens with a consequential verb ("Reserves
    tickets…" for `Trains_1_GetTrainTickets`). Otherwise a consequential word anywhere in the
    name commits, a mutating word does not, and a name with neither is judged by the first
    three words of its description.
    """
    verbs = name_verbs(name)
    lead = _DESC_WORD.findall(description[:80].lower())[:3]
    if verbs and all(v in READ_VERBS for v in verbs):
        return bool(lead) and _is_consequential_word(lead[0])
    words = identifier_words(name)
    if any(w in CONSEQUENTIAL_VERBS for w in (*verbs, *words)):  # verbs: `check_out` too
        return True
    if any(w in MUTATING_VERBS for w in words):
        return False
    return any(_is_consequential_word(w) for w in lead)


def side_effect_tools(names: Iterable[str], descriptions: Iterable[str]) -> tuple[str, ...]:
    """The declared tools that would commit side effects, in declaration order."""
    descs = list(descriptions)
    return tuple(
        name
        for i, name in enumerate(names)
        if tool_is_consequential(name, descs[i] if i < len(descs) else "")
    )
