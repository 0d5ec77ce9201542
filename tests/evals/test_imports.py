"""policies.learned stays a run-time package: it never imports evals or router."""

from __future__ import annotations

import ast
from pathlib import Path

import policies.learned

PACKAGE = Path(policies.learned.__file__).parent


def test_learned_router_never_imports_evals_or_router() -> None:
    """No module under policies/learned imports `evals` or `router`."""
    bad = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] in {"evals", "router"}]
    assert bad == []
