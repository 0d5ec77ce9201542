"""Argument types for the command line: a bad value is the parser's one-line error (exit 2),
never a traceback from deep inside the command or, worse, a silently different value."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

N = TypeVar("N", int, float)


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (a larger number would wrap around to another port)."""
    return _checked(text, int, "a port number", lambda port: 0 <= port <= 65535, "0-65535")


def positive_number(text: str) -> float:
    """A finite number above zero (a rate, a duration, a timeout)."""
    return _checked(text, float, "a number", lambda value: math.isfinite(value) and value > 0,
                    "a finite number above 0")


def positive_int(text: str) -> int:
    """A whole number above zero (a count)."""
    return _checked(text, int, "a whole number", lambda value: value > 0, "above 0")


def seed_number(text: str) -> int:
    """A random seed, 0 to 2**32 - 1 (numpy's generators and scikit-learn's `random_state`
    take no negative seed, and the latter none beyond 32 bits)."""
    return _checked(text, int, "a whole number", lambda value: 0 <= value < 2**32,
                    "0 to 4294967295")


def comma_separated(parse: Callable[[str], N | str]) -> Callable[[str], list[N | str]]:
    """A comma-separated list, each item read by `parse` (whose error names the item)."""
    def parse_all(text: str) -> list[N | str]:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"an empty item in {text[:100]!r}")
        return [parse(item) for item in items]

    return parse_all


def one_of(*choices: str) -> Callable[[str], str]:
    """One of a few words (`comma_separated(one_of(...))` for a list of them)."""
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(
                f"{text[:100]!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _checked(text: str, parse: Callable[[str], N], kind: str, fits: Callable[[N], bool],
             bounds: str) -> N:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {kind}: {text[:100]!r}") from None
    if not fits(value):
        raise argparse.ArgumentTypeError(f"must be {bounds}, not {text[:100]!r}")
    return value


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host."""
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 (urllib checks the port only when it is read)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text[:100]!r}")
    return text
