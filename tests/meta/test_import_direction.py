"""Imports point one way (DESIGN.md §3): router → policies, cache; never back; nobody → evals."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The CLI registry may name evals' command module (imported only to run offline commands).
ALLOWED = {("router/cli.py", "evals.cli")}
FORBIDDEN = {
    "policies": ("router", "evals", "cache"),
    "cache": ("router", "evals"),
    "router": ("evals",),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _string_module_refs(path: Path) -> set[str]:
    """Module names written as strings (lazy `importlib` imports, e.g. the CLI registry)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.startswith(("evals.", "router.", "cache.", "policies."))
            and _is_module(node.value)}


def test_packages_import_only_downstream() -> None:
    """No module imports a package it must not depend on."""
    violations = []
    for package, banned in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for module in _imports(path) | _string_module_refs(path):
                top = module.split(".")[0]
                if top in banned and (rel, module) not in ALLOWED:
                    violations.append(f"{rel} imports {module}")
    assert violations == []


def test_only_the_litellm_adapter_imports_litellm() -> None:
    """litellm stays behind one module."""
    importers = sorted(path.relative_to(ROOT).as_posix()
                       for package in ("router", "policies", "cache")
                       for path in (ROOT / package).rglob("*.py")
                       if any(m.split(".")[0] == "litellm" for m in _imports(path)))
    assert importers == ["router/providers/litellm_adapter.py"]
