"""Upstream JSON with lone UTF-16 surrogates, made well-formed at the adapter's edge.

JSON lets a string spell any UTF-16 code unit as `\\uXXXX`, so a server that cuts text by code
units (a JavaScript one cutting a stream's deltas, or an emoji at a length limit) sends half an
astral character: `"\\ud83d"`. Python's `json` and JavaScript's `JSON.parse` read it; orjson, which
the router reads and writes JSON with, refuses it (as I-JSON, RFC 7493, does), and so does
UTF-8. Read with orjson alone, such an answer was a 500 through litellm (whose reader took it,
so the router's writer failed) and a cut stream or a 502 through the pass-through.

Here the answer is read with the standard library when orjson refuses it, and every string in
it made well-formed: the two halves of a character inside one string are joined, and a half
left alone becomes U+FFFD (the replacement character), as a decoder of malformed UTF-8 does.
A pair split across two stream chunks becomes two U+FFFD: each chunk is one JSON document. What
is relayed is the repaired document, so every later reader (the cache, the client) gets text
that any UTF-8 reader takes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def repaired(raw: bytes) -> tuple[Any, bytes] | None:
    """What orjson refused in `raw`, read by the standard library, its strings made well-formed,
    and written anew; None when the standard library cannot read it either (it is not JSON)."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    fixed = well_formed(parsed)
    return fixed, orjson.dumps(fixed)


def dumps(value: Any) -> bytes:
    """`orjson.dumps(value)`, its strings made well-formed first when one holds a lone surrogate."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(well_formed(value))


def well_formed(value: Any) -> Any:
    """`value` with every string (keys included) re-paired or replaced (see the module)."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, dict):
        return {well_formed(k): well_formed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [well_formed(item) for item in value]
    return value
