"""`serve`, `bench` and `experiments report` explain every option in `--help`, with its default."""

from __future__ import annotations

import argparse
import os
from unittest import mock

import pytest

from router.cli import build_parser


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = actions[0].choices[name]
    return parser


@pytest.mark.parametrize("path", [("serve",), ("bench",), ("experiments", "report")])
def test_every_option_is_explained_with_its_default(path: tuple[str, ...]) -> None:
    parser = _subparser(build_parser(), *path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{' '.join(path)} {action.dest}: no help"
        takes_value = action.nargs != 0
        if takes_value and not action.required and action.option_strings:
            assert "default" in action.help, f"{' '.join(path)} {action.dest}: no default"


def test_help_shows_defaults_but_never_a_key_from_the_environment() -> None:
    secret = "sk-bench-secret-1234"
    env = {"SLOROUTER_BENCH_API_KEY": secret, "SLOROUTER_API_KEY": secret}
    with mock.patch.dict(os.environ, env):
        parser = build_parser()
    for path in [("serve",), ("bench",), ("experiments", "report")]:
        text = _subparser(parser, *path).format_help()
        assert secret not in text
    serve = _subparser(parser, "serve").format_help()
    assert "127.0.0.1" in serve and "8080" in serve and "info" in serve
