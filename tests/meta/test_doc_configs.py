"""The YAML configs in the docs can be served as written.

The loader substitutes every `${NAME}` in a config file, its comments included (it reads the
text before YAML does), and `serve` refuses one that is unset. A `${BASE}` written in a comment
of configuration.md's reference config made it fail `serve` with every key it names set,
though `policy check` (which stands in for unset names) passed it (the docs audit of
2026-12-07).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def _yaml_blocks() -> list[tuple[str, str]]:
    return [(path.name, found.group(1)) for path in DOCS
            for found in YAML_BLOCK.finditer(path.read_text())]


def test_the_docs_have_yaml_configs() -> None:
    names = {name for name, _ in _yaml_blocks()}
    assert {"README.md", "configuration.md", "experiments.md"} <= names, names


def test_no_comment_of_a_documented_config_names_a_variable() -> None:
    found = [(name, line.strip()) for name, block in _yaml_blocks()
             for line in block.splitlines()
             if (comment := COMMENT.search(line)) is not None and "${" in comment.group(1)]
    assert not found, found
