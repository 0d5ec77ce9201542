"""Every error `code` the router can send is in docs/errors.md's tables.

The codes are found in the source, not listed here: every string constant in a `code=`
argument under `router/` (the provider simulator, a separate server, excluded), the codes of
the provider-error mapping tables, the request-validation codes and any class-level default
`code` of the error hierarchy. A new code without a row in the doc fails this test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from router import errors
from router.api.body import _code as validation_code
from router.providers import exception_mapping, upstream_answers

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {ROOT / "router" / "providers" / "simulator"}


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path)))
            for path in sorted((ROOT / "router").rglob("*.py"))
            if not any(skipped in path.parents for skipped in SKIPPED)]


def _code_positions(trees: list[tuple[Path, ast.Module]]) -> dict[str, int]:
    """Functions of router/ with a positional parameter named `code`: name → its index."""
    positions: dict[str, int] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                if "code" in names:
                    positions[node.name] = names.index("code")
    return positions


def _strings(value: ast.expr) -> list[str]:
    """The string constants an argument may evaluate to (`x if c else y` gives both), not
    the keys of subscripts (`error["type"]`)."""
    keys = {id(inner) for sub in ast.walk(value)
            if isinstance(sub, ast.Subscript) for inner in ast.walk(sub.slice)}
    return [inner.value for inner in ast.walk(value)
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
            and id(inner) not in keys]


def _code_arguments() -> dict[str, str]:
    """Code → one place that sends it: every string constant given as a `code` argument, by
    keyword or by position to a router function whose parameter is named `code`."""
    trees = _trees()
    positions = _code_positions(trees)
    found: dict[str, str] = {}
    for path, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            values = [k.value for k in node.keywords if k.arg == "code"]
            func = node.func
            name = (func.id if isinstance(func, ast.Name)
                    else func.attr if isinstance(func, ast.Attribute) else None)
            at = positions.get(name or "")
            if at is not None and at < len(node.args):
                values.append(node.args[at])
            for value in values:
                for code in _strings(value):
                    found.setdefault(code, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _class_defaults() -> set[str]:
    classes: list[type[errors.SlorouterError]] = [errors.SlorouterError]
    defaults: set[str] = set()
    while classes:
        klass = classes.pop()
        code = vars(klass).get("code")
        if isinstance(code, str):
            defaults.add(code)
        classes.extend(klass.__subclasses__())
    return defaults


def router_codes() -> set[str]:
    codes = set(_code_arguments())
    codes |= set(exception_mapping._CODE_BY_CLASS_NAME.values())
    codes |= {code for code, _ in exception_mapping._MISCONFIGURED_LOCALLY.values()}
    codes |= {code for code, _ in upstream_answers.MISCONFIGURED.values()}
    codes |= set(exception_mapping._GENERIC_CODES.values())
    codes |= {validation_code(kind) for kind in ("missing", "int_type", "greater_than")}
    return codes | _class_defaults()


def documented_codes() -> set[str]:
    text = (ROOT / "docs" / "errors.md").read_text()
    return set(re.findall(r"^\| `([a-z_]+)` \|", text, re.M))


def test_the_scan_finds_codes_of_every_kind() -> None:
    """The scan itself works: literal, conditional, table-driven and validation codes."""
    codes = router_codes()
    assert {"conflicting_hint", "no_model_fits", "over_cost_ceiling", "upstream_auth",
            "deployment_model_unknown", "missing_required_parameter",
            "server_shutting_down"} <= codes


def test_every_error_code_is_documented() -> None:
    where = _code_arguments()
    missing = sorted(router_codes() - documented_codes())
    assert not missing, "codes without a row in docs/errors.md: " + ", ".join(
        f"{code} ({where.get(code, 'a mapping table')})" for code in missing)


def test_every_documented_code_exists() -> None:
    """A row for a code the router no longer sends is stale."""
    stale = sorted(documented_codes() - router_codes())
    assert not stale, f"docs/errors.md documents codes the router never sends: {stale}"
