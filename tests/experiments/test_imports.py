"""Import direction of the experiment packages (DESIGN.md §3)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return found


def test_policies_experiments_import_neither_router_nor_evals() -> None:
    """The spec and assignment depend only on policies.labels, the configuration models' base
    (policies.config_model, itself only pydantic) and libraries."""
    project = {m for m in _imports("policies/experiments") if m.split(".")[0] in
               {"router", "evals", "cache", "policies"}}
    assert all(m.startswith("policies.") for m in project), project
    assert {m for m in project if not m.startswith("policies.experiments")} <= {"policies.labels",
                                                                         "policies.config_model"}


def test_router_experiments_never_import_evals() -> None:
    """Nothing in the service's experiment code reaches into evals."""
    assert not {m for m in _imports("router/experiments") if m.split(".")[0] == "evals"}
