"""The runtime lock (what the Docker image installs) is requirements.lock less the test tools:
the same pins, and every package the service's dependencies pull in."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    lines = [s for line in path.read_text().splitlines()
             if (s := line.strip()) and not s.startswith("#")]
    return {_norm(Requirement(s).name): s for s in lines}


def _closure(roots: list[Requirement], python: dict[str, str] | None = None) -> set[str]:
    """Every distribution the roots need, walked through installed metadata: on this
    interpreter, or with `python` (marker variables such as `python_full_version`) in its place.
    A distribution not installed here (needed only on another Python) is named, not walked."""
    seen: set[str] = set()
    pending = [(r, frozenset(r.extras)) for r in roots]
    while pending:
        req, extras = pending.pop()
        if req.marker is not None and not any(
                req.marker.evaluate({**(python or {}), "extra": e}) for e in (extras or {""})):
            continue
        name = _norm(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            requires = []
        for text in requires:
            pending.append((Requirement(text), frozenset(req.extras)))
    return {k.split("[")[0] for k in seen}


def test_the_runtime_lock_is_the_full_lock_less_test_tools() -> None:
    full, runtime = _pins(ROOT / "requirements.lock"), _pins(ROOT / "requirements-runtime.lock")
    assert all(full.get(name) == line for name, line in runtime.items())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = _closure([Requirement(d) for d in project["dependencies"]])
    assert needed - set(runtime) == set()
    tools = _closure([Requirement(d) for d in project["optional-dependencies"]["test"]])
    assert {"pytest", "mypy", "ruff", "hypothesis"} <= tools - set(runtime)


def test_the_runtime_lock_pins_what_the_oldest_supported_python_needs_too() -> None:
    """`requires-python = ">=3.11"` takes 3.11.0 (Debian 12's python3 is 3.11.2), where a
    dependency may need more than it does here (redis: async-timeout before 3.11.3): the lock
    pins that too, or `pip install -r` there pulls whatever version is newest that day."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    runtime = _pins(ROOT / "requirements-runtime.lock")
    needed = _closure([Requirement(d) for d in project["dependencies"]],
                      {"python_version": "3.11", "python_full_version": "3.11.0"})
    assert needed - set(runtime) == set()
