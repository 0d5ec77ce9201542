"""One line for a pydantic `ValidationError`: where its first problem lies, and what it is."""

from __future__ import annotations

from pydantic import ValidationError


def first_problem(exc: ValidationError) -> tuple[str, str]:
    """The first problem's place (a dotted path, "" for the value itself) and its message."""
    first = exc.errors()[0]
    return ".".join(str(part) for part in first["loc"]), str(first["msg"])


def one_line(exc: ValidationError) -> str:
    """`place: message` for the first problem (just the message when it is the whole value)."""
    where, what = first_problem(exc)
    return f"{where}: {what}" if where else what
