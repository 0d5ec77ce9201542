"""What the wheel, the sdist and the Docker image carry besides code: the licence text, the
notices of the data files that ship, and every file the Dockerfile's build copies."""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("router", "policies", "cache", "evals")


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_the_apache_licence_text_ships_with_the_package() -> None:
    """`license = "Apache-2.0"` names the licence; redistributing the code needs its text, in
    the repository and, through `license-files`, in every wheel and sdist built from it."""
    project = _project()
    assert project["license"] == "Apache-2.0"
    files = project.get("license-files")
    assert files == ["LICENSE"], files
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text


def test_every_shipped_eval_data_file_names_its_source_and_licence() -> None:
    """The suites' item files ship in the wheel (package data `suites/data/*`): a README beside
    them names each file's source and licence (WikiBio's CC BY-SA needs its notice kept)."""
    data = ROOT / "evals" / "suites" / "data"
    readme = (data / "README.md").read_text()
    shipped = sorted(p.name for p in data.iterdir() if p.is_file() and p.name != "README.md")
    assert shipped
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", readme, re.M)}
    assert set(shipped) <= set(rows), set(shipped) - set(rows)
    for name in shipped:
        assert re.search(r"MIT|Apache-2\.0|CC BY", rows[name]), rows[name]


def _dockerignored() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [s for line in lines if (s := line.strip()) and not s.startswith("#")]


def test_what_git_ignores_stays_out_of_the_docker_build_context() -> None:
    """Local state (the disk result cache's cached answers under .slorouter/, virtualenvs,
    build output, logs) was sent to the Docker daemon with every `docker build`: each
    .gitignore pattern has its .dockerignore counterpart (or a parent directory there)."""
    ignored = set(_dockerignored())
    missing = []
    for line in (ROOT / ".gitignore").read_text().splitlines():
        pattern = line.strip().strip("/")
        if not pattern or line.startswith("#"):
            continue
        parents = {"/".join(pattern.split("/")[:i]) for i in range(1, pattern.count("/") + 1)}
        if not ({pattern, "**/" + pattern} | parents) & ignored:
            missing.append(pattern)
    assert missing == []


def test_the_docker_build_copies_what_pip_install_of_the_checkout_reads() -> None:
    """Every COPY source exists and is not excluded from the build context, and the build stage
    copies the files pyproject.toml names (readme, licence files, the listed packages), or
    `pip install .` in the image fails, or builds a package without them."""
    sources: list[str] = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    ignored = _dockerignored()
    for source in sources:
        assert (ROOT / source).exists(), source
        assert source not in ignored and source.split("/")[0] not in ignored, source
    project = _project()
    needed = {str(project["readme"]), "pyproject.toml", *project.get("license-files", [])}
    setuptools_find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    needed |= {p.rstrip("*") for p in setuptools_find["packages"]["find"]["include"]}
    assert needed <= set(sources), needed - set(sources)


def _imported_top_level_names(package: str) -> set[str]:
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_of_the_package_is_a_declared_dependency() -> None:
    """What the shipped packages import is pinned in `dependencies`, not left to come in
    through another package's requirements (jsonschema came only through litellm's range: a
    `pip install slorouter` got whichever version litellm allowed, or none if it dropped it).
    A distribution's own compiled part (pydantic_core of pydantic) counts as its own."""
    declared = {_norm(Requirement(d).name) for d in _project()["dependencies"]}
    own_parts = {"pydantic-core": "pydantic"}
    owners = metadata.packages_distributions()
    imported = set().union(*map(_imported_top_level_names, PACKAGES))
    third_party = imported - set(sys.stdlib_module_names) - set(PACKAGES) - {"__future__"}
    undeclared = {}
    for name in sorted(third_party):
        dists = {_norm(d) for d in owners.get(name, [name])}
        if not dists & declared and not {own_parts.get(d) for d in dists} & declared:
            undeclared[name] = sorted(dists)
    assert undeclared == {}


def test_every_file_the_packages_read_at_run_time_is_package_data() -> None:
    """A file beside the code ships in the wheel (and so the Docker image, which installs it)
    only when a `package-data` glob names it: the classifier's model, the default policies and
    the simulator's profiles do; a data file of a kind no glob names (a `.csv`, a `.txt`) would
    be left out, and the installed router would fail where the checkout works. (A wheel built
    from this checkout and installed alone served the embedded default as a non-root user from
    a directory of its own on 2026-12-05.) The training datasets stay out on purpose."""
    setuptools_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs: dict[str, list[str]] = setuptools_config["package-data"]
    left_out = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            relative = path.relative_to(ROOT)
            if (not path.is_file() or path.suffix in (".py", ".pyc")
                    or "__pycache__" in relative.parts
                    or relative.parts[:2] == ("evals", "datasets")):
                continue
            within = path.relative_to(ROOT / package).as_posix()
            if not (any(fnmatch.fnmatch(path.name, g) for g in globs["*"])
                    or any(fnmatch.fnmatch(within, g) for g in globs.get(package, []))):
                left_out.append(str(relative))
    assert left_out == []
