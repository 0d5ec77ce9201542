"""What the wheel, the sdist and the Docker image carry besides code: the licence text, the
notices of the data files that ship, and every file the Dockerfile's build copies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


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
