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


def _closure(roots: list[Requirement]) -> set[str]:
    """Every distribution the roots need here, walked through installed metadata."""
    seen: set[str] = set()
    pending = [(r, frozenset(r.extras)) for r in roots]
    while pending:
        req, extras = pending.pop()
        if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            continue
        name = _norm(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        for text in metadata.requires(req.name) or []:
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
