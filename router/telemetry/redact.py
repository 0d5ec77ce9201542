"""Log filters that keep secrets and request content out of every log line, and add trace ids.

`RedactingFilter` rewrites each record before any handler formats it: known secret values
(provider keys, client keys) and secret-shaped strings (`sk-…`, `Bearer …`, `api_key=…`) become
`[REDACTED]`, and event fields that could hold request content (`messages`, `prompt`,
`content`, …) are withheld. `TraceLogFilter` adds `trace_id`/`span_id` of the request being
served. `install` attaches both to the root logger's handlers (handler filters also see records
propagated from child loggers, which logger filters do not).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Final

from router.telemetry.context import current_request

REDACTED: Final = "[REDACTED]"
WITHHELD: Final = "[content withheld]"
ARGUMENT_WITHHELD: Final = "[withheld]"
CONTENT_KEYS: Final = frozenset({"messages", "prompt", "prompts", "content", "completion",
                                 "choices", "input", "output", "text", "body", "delta"})
_PATTERNS: Final = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"(?i)\b(api[_-]?key|x-api-key|authorization|password|secret|master_key)"
               r"(\"?'?\s*[:=]\s*\"?'?)[^\s\"',}]+"),
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the known `secrets` (longest first; shorter than 6 characters they are not
    looked for) and secret-shaped strings replaced by `[REDACTED]`. Log lines and the upstream
    messages that reach clients both go through it."""
    for secret in secrets:
        if len(secret) >= 6 and secret in text:
            text = text.replace(secret, REDACTED)
    text = _PATTERNS[0].sub(REDACTED, text)
    text = _PATTERNS[1].sub(REDACTED, text)
    return _PATTERNS[2].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


class Scrubber:
    """`scrub` with a fixed set of known secrets (those of 6 characters or more, longest
    first): the log filter's, and the span builder's for the strings clients send."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        return scrub(text, self._secrets)


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.scrub = Scrubber(secrets)

    def _clean(self, value: object, key: str | None = None) -> object:
        if key is not None and key.lower() in CONTENT_KEYS:
            return WITHHELD
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, Mapping):
            return {k: self._clean(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._clean(v) for v in value]
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg, record.args = record.getMessage(), None
        record.msg = self.scrub(str(record.msg))
        data = getattr(record, "event_data", None)
        if isinstance(data, Mapping):
            record.event_data = self._clean(data)
        return True


class TraceLogFilter(logging.Filter):
    """Adds the `request_id` of the request being served to every record logged while serving
    it (the libraries' own too), and its `trace_id` and `span_id` when it has a trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = current_request.get()
        if request is not None:
            data = getattr(record, "event_data", None)
            extra = {"request_id": request.request_id}
            trace = request.trace
            if trace is not None:
                extra["trace_id"], extra["span_id"] = trace.trace_id_hex, trace.span_id_hex
            record.event_data = {**data, **extra} if isinstance(data, Mapping) else extra
        return True


# A %-style conversion of a logging template (`%s`, `%(name)r`, `%.2f`, `%%`).
_CONVERSION: Final = re.compile(
    r"%(?:\([^)]*\))?[#0 +\-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrsa%]")


def _argument_places_marked(template: str) -> str:
    """`template` with each argument's place as `[withheld]` (and `%%` as `%`), as a reader
    would otherwise see a bare `model=%s`."""
    return _CONVERSION.sub(lambda m: "%" if m.group() == "%%" else ARGUMENT_WITHHELD, template)


def without_arguments(record: logging.LogRecord) -> bool:
    """A logger filter for third-party loggers whose arguments may hold request or answer text
    (an exception's message, a pydantic error quoting a value): the record keeps its template,
    each argument's place marked `[withheld]`, and its exception's class and frames
    (`JsonFormatter`), and loses its arguments."""
    if not isinstance(record.msg, str):
        record.msg = type(record.msg).__name__
    elif record.args:
        record.msg = _argument_places_marked(record.msg)
    record.args = None
    return True


def install(secrets: Iterable[str] = (), logger: logging.Logger | None = None) -> RedactingFilter:
    """Attach trace ids and redaction to every handler of `logger` (default: root)."""
    target = logger if logger is not None else logging.getLogger()
    redacting = RedactingFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(TraceLogFilter())
        handler.addFilter(redacting)
    return redacting
