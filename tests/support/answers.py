"""What every answer of the router must look like, whatever it was asked or its upstream said;
and a strategy for any JSON value, for the tests that generate inputs (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

ERROR_FIELDS = {"message", "type", "param", "code"}

scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
any_json = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10)


def answer_kind(status: int, content_type: str, data: bytes, context: Any = None) -> str:
    """Check an answer's shape and name it: `whole` (a JSON object), `stream ended` (every event
    a JSON object, the last `[DONE]`), `stream error <code>` (its last event an error), or the
    error's code. An error, in the body or as a stream's last event, has OpenAI's fields, a
    message, and is never the router's own `internal_error`."""
    context = context if context is not None else (status, data[:300])
    if status == 200 and content_type.startswith("text/event-stream"):
        events = [line[6:] for line in data.split(b"\n") if line.startswith(b"data: ")]
        assert events, context
        for event in events[:-1]:
            assert isinstance(json.loads(event), dict), context
        if events[-1] == b"[DONE]":
            return "stream ended"
        return f"stream error {_checked_error(json.loads(events[-1]), context)}"
    if status == 200:
        assert isinstance(json.loads(data), dict), context
        return "whole"
    return _checked_error(json.loads(data), context)


def _checked_error(document: Any, context: Any) -> str:
    error = document["error"]
    assert error.keys() >= ERROR_FIELDS, context
    assert isinstance(error["message"], str) and error["message"], context
    assert error["code"] != "internal_error", context
    return str(error["code"])
