"""Command-line argument types: a value out of range is the parser's one-line error."""

from __future__ import annotations

import argparse

import pytest

from router.cli_types import http_url, port_number, positive_int, positive_number


@pytest.mark.parametrize(("parse", "good", "bad"), [
    (port_number, ["0", "8080", "65535"], ["73817", "-1", "abc", "80.5"]),
    (positive_number, ["0.5", "10", "1e3"], ["0", "-5", "nan", "inf", "ten"]),
    (positive_int, ["1", "500"], ["0", "-2", "1.5"]),
    (http_url, ["http://127.0.0.1:8080", "https://router.example/v1"],
     ["127.0.0.1:8080", "not-a-url", "ftp://host", "http://h:99999", "http://"]),
])
def test_values_in_range_pass_and_others_are_argument_errors(
        parse: object, good: list[str], bad: list[str]) -> None:
    assert callable(parse)
    for text in good:
        assert parse(text) is not None
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_a_port_keeps_its_number() -> None:
    """73817 used to reach the socket and wrap around to 8281; in range it is kept as given."""
    assert port_number("8281") == 8281 and positive_number("2.5") == 2.5
