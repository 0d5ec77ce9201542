"""Placeholder: sub-commands of this area are registered here (see `router.cli`)."""

import argparse
from typing import Any


def add_parser(subparsers: "argparse._SubParsersAction[Any]") -> None:
    """No sub-commands yet."""
