"""Build the shipped suites' item files from the in-repo datasets (run once; output committed).

    python -m evals.run.build_suites [--out evals/suites/data]

- `gsm8k_50.jsonl` (math, numeric): the first 50 GSM8K test questions of
  `evals/datasets/routing/gsm8k.jsonl.gz`; the final answers are in `labels.json`.
- `mmlu_57.jsonl` (reasoning_analysis, choice): 57 MMLU test questions of
  `evals/datasets/routing/mmlu.jsonl.gz` from five non-mathematical subjects; the gold letters
  are in `labels.json` (see the suites' README for how they were set).
- `wikibio_extraction_50.jsonl` (extraction, json_schema): the first 50 English, non-derived
  WikiBio prompts with a field list of `evals/datasets/prompts/` (test split, then train); each
  item's schema requires exactly the listed fields as keys.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"
DEFAULT_OUT = ROOT / "suites" / "data"
_FIELD = re.compile(r"^\s*-\s+(.+?)\s*$")


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def _labelled(dataset: Path, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Rows whose id has a label, in the dataset's order, as suite items."""
    items = []
    for row in _rows(dataset):
        if row["id"] in labels:
            prompt = row["prompt"].removesuffix("Answer:").rstrip()
            items.append({"id": row["id"], "prompt": prompt, "expected": labels[row["id"]]})
    missing = sorted(set(labels) - {i["id"] for i in items})
    if missing:
        raise ValueError(f"labels without a row in {dataset.name}: {missing[:5]}")
    return items


def snake(field: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", field.lower()).strip("_")


def bio_fields(text: str) -> list[str]:
    """The `- field` lines of a WikiBio prompt before its `Bio:` paragraph."""
    head = text.split("Bio:", 1)[0]
    fields = [snake(m.group(1)) for line in head.splitlines() if (m := _FIELD.match(line))]
    return list(dict.fromkeys(f for f in fields if f))


def extraction_item(row: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    name = row["text"].split("details on", 1)[-1].split("'s:", 1)[0].strip()
    prompt = (f"{row['text'].rstrip()}\n\nAnswer with only a JSON object whose keys are exactly "
              f"these fields: {', '.join(fields)}. Use null for a detail the bio does not give.")
    value_types = ["string", "number", "array", "null"]
    schema = {"type": "object", "required": fields, "additionalProperties": False,
              "properties": {f: {"type": value_types} for f in fields}}
    simulated = {f: (name if f == "name" else None) for f in fields}
    return {"id": row["id"], "prompt": prompt,
            "simulated_answer": json.dumps(simulated, ensure_ascii=False),
            "grader": {"type": "json_schema", "schema": schema}}


def extraction_items(count: int) -> list[dict[str, Any]]:
    items = []
    prompts = DATASETS / "prompts"
    for row in (*_rows(prompts / "test.jsonl.gz"), *_rows(prompts / "train.jsonl.gz")):
        if row["source"] != "t0-wiki_bio" or row["lang"] != "en" or row["derived"]:
            continue
        fields = bio_fields(row["text"])
        if len(fields) >= 2 and "details on" in row["text"]:
            items.append(extraction_item(row, fields))
        if len(items) == count:
            break
    return items


def _write(path: Path, items: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(i, ensure_ascii=False, sort_keys=True) + "\n"
                            for i in items), encoding="utf-8")
    print(f"wrote {path} ({len(items)} items)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    labels = json.loads((DEFAULT_OUT / "labels.json").read_text(encoding="utf-8"))
    routing = DATASETS / "routing"
    _write(args.out / "gsm8k_50.jsonl", _labelled(routing / "gsm8k.jsonl.gz", labels["gsm8k"]))
    _write(args.out / "mmlu_57.jsonl", _labelled(routing / "mmlu.jsonl.gz", labels["mmlu"]))
    _write(args.out / "wikibio_extraction_50.jsonl", extraction_items(50))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
