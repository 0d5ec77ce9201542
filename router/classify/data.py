"""Read labelled prompt rows (JSON Lines, optionally gzip) into training examples.

The row schema is checked by a pydantic model at this boundary; inside, rows are frozen
`Example`s holding the request view. Augmentation and training live elsewhere.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from policies.labels import Risk, Task
from router.classify.types import RequestView


class PromptRow(BaseModel):
    """One labelled row as stored in `evals/datasets/prompts/*.jsonl.gz`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    text: str
    task: Task
    risk: Risk
    pii: bool = False
    jailbreak: bool = False
    lang: str = "en"
    source: str = ""
    tools: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Example:
    """A request view with its labels."""

    view: RequestView
    task: Task
    risk: Risk
    jailbreak: bool
    pii: bool
    lang: str
    source: str


class DataError(ValueError):
    """A data file could not be read; the message names the file and line."""


def open_lines(path: Path) -> Iterator[bytes]:
    """The file's lines (gunzipped for `.gz`, undecoded): a line that is not UTF-8 fails its
    own validation, by number; a cut or corrupt gzip file is a `DataError`."""
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as fh:
        try:
            yield from fh
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a cut or corrupt download
            raise DataError(f"{path}: not a complete gzip file ({exc})") from None


def example_of(row: PromptRow) -> Example:
    """The single-message request a labelled row stands for."""
    tools = tuple(row.tools) if row.tools is not None else ()
    return Example(
        view=RequestView(messages=(("user", row.text),), tool_names=tools),
        task=row.task,
        risk=row.risk,
        jailbreak=row.jailbreak,
        pii=row.pii,
        lang=row.lang,
        source=row.source,
    )


def read_examples(path: Path) -> list[Example]:
    """Every row of one data file as an `Example` (raises `DataError` naming a bad line)."""
    out: list[Example] = []
    for number, line in enumerate(open_lines(path), start=1):
        if not line.strip():
            continue
        try:
            out.append(example_of(PromptRow.model_validate_json(line)))
        except ValidationError as exc:
            raise DataError(f"{path}:{number}: {exc.errors()[0]['msg']}") from exc
    return out


def files_hash(paths: Sequence[Path]) -> str:
    """SHA-256 over the decompressed contents of the files, in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        for line in open_lines(path):
            digest.update(line)
    return digest.hexdigest()
