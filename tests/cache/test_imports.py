"""Import direction: `cache` uses only `policies.labels`, the standard library and third parties."""

from __future__ import annotations

import ast
from pathlib import Path

import cache

FORBIDDEN_ROOTS = ("router", "evals", "policies", "tests")
ALLOWED = ("policies.labels",)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_cache_imports_only_labels_from_the_project() -> None:
    """No module of `cache` imports router, evals, tests or any of policies but its labels."""
    root = Path(cache.__file__).parent
    modules = sorted(root.rglob("*.py"))
    assert modules
    offending = {
        f"{path.relative_to(root)}: {name}"
        for path in modules
        for name in _imports(path)
        if name.split(".")[0] in FORBIDDEN_ROOTS and name not in ALLOWED
    }
    assert offending == set()
