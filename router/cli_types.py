"""Argument types for the command line: a bad value is the parser's one-line error (exit 2),
never a traceback from deep inside the command or, worse, a silently different value."""

from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (a larger number would wrap around to another port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {port}")
    return port


def positive_number(text: str) -> float:
    """A finite number above zero (a rate, a duration, a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number above zero (a count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return value


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text[:100]!r}")
    try:
        parts.port  # noqa: B018 (urllib checks the port only when it is read)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text[:100]!r}") from None
    return text
