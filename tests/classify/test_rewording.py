"""The shipped classifier reads a request the same with or without its final mark, a leading
"please" or an emoji (docs/classifier.md, "Punctuation, please and emoji"). Before the
2026-12-06 retrain, 922 of the 932 Persian workload questions became `autocomplete` without
their final `؟`, and "please " before them moved 41 held-out rows that are no actions into
`action`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from router.classify import Hints, load_default_classifier, view_from_openai
from router.classify.data import Example, read_examples

DATA = Path(__file__).resolve().parents[2] / "evals" / "datasets" / "prompts"


def _task(text: str) -> str:
    view = view_from_openai([{"role": "user", "content": text}])
    return load_default_classifier().classify(view, Hints()).task


def _without_final_mark(text: str) -> str:
    text = text.rstrip()
    return text[:-1].rstrip() if text[-1:] in ".?!؟" else text


@pytest.fixture(scope="module")
def held_out() -> list[Example]:
    return read_examples(DATA / "test.jsonl.gz") + read_examples(DATA / "gpl-3.0" / "test.jsonl.gz")


def test_persian_questions_without_their_final_mark_stay_chat() -> None:
    """932 real Persian questions (chat); 840 stay chat without their final mark (was 6)."""
    with gzip.open(DATA / "gpl-3.0" / "multilingual_workload.jsonl.gz", "rt") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    chat = sum(_task(_without_final_mark(t)) == "chat" for t in texts)
    assert chat >= 0.85 * len(texts), chat


def test_held_out_persian_rows_without_their_final_mark_keep_their_task(
    held_out: list[Example],
) -> None:
    """Persian and mixed held-out rows other than autocomplete: 0.95 right without their final
    mark (was 0.45); with it, as before."""
    rows = [ex for ex in held_out if ex.lang != "en" and ex.task != "autocomplete"]
    right = sum(_task(_without_final_mark(ex.view.messages[-1][1])) == ex.task for ex in rows)
    assert right >= 0.9 * len(rows), (right, len(rows))


@pytest.mark.parametrize(("edit", "most"), [("please ", 25), (" 🙂", 6)])
def test_please_or_an_emoji_moves_few_held_out_rows_into_action(
    held_out: list[Example], edit: str, most: int
) -> None:
    """Rows that are not actions and are not read as one: "please " before them moves 17 into
    `action` (41 with the artifact before 2026-12-06), an emoji after them 2 (was 1)."""
    moved = 0
    for ex in held_out:
        text = ex.view.messages[-1][1]
        edited = edit + text if edit.endswith(" ") else text.rstrip() + edit
        moved += ex.task != "action" and _task(text) != "action" and _task(edited) == "action"
    assert moved <= most, moved
