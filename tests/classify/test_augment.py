"""Augmentation keeps labels, is deterministic for a seed, and rewords only the last user message
(docs/classifier.md, "How it decides" item 2 and "Punctuation, please and emoji")."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from router.classify.augment import (
    AugmentConfig,
    augment,
    reword,
    toggle_final_mark,
    with_emoji,
    with_please,
)
from router.classify.data import Example, read_examples

DATA = Path(__file__).resolve().parents[2] / "evals" / "datasets" / "prompts"


@pytest.fixture(scope="module")
def rows() -> list[Example]:
    return read_examples(DATA / "test.jsonl.gz")[:600] + read_examples(
        DATA / "gpl-3.0" / "test.jsonl.gz"
    )


@pytest.mark.parametrize(
    ("text", "marks"),
    [
        ("what is your name?", {"what is your name"}),
        ("کجاست؟", {"کجاست"}),
        ("  done.  ", {"  done"}),
        ("set an alarm", {"set an alarm?", "set an alarm.", "set an alarm!"}),
        ("پایتخت ایران کجاست", {"پایتخت ایران کجاست؟", "پایتخت ایران کجاست."}),
        ("   ", {"   "}),
    ],
)
def test_toggle_final_mark_removes_or_adds_one_mark(text: str, marks: set[str]) -> None:
    """A final mark goes; without one, a mark of the text's script comes (؟ or . after Persian)."""
    assert {toggle_final_mark(text, random.Random(seed)) for seed in range(40)} == marks


def test_please_and_emoji_follow_the_script() -> None:
    assert with_please("book a table") == "please book a table"
    assert with_please("این متن را خلاصه کن") == "لطفاً این متن را خلاصه کن"
    after = with_emoji("thanks ", random.Random(1))
    before = with_emoji(" thanks", random.Random(1), before=True)
    assert after.startswith("thanks ") and len(after.split()) == 2
    assert before.endswith(" thanks") and len(before.split()) == 2


def test_reword_keeps_labels_and_the_earlier_turns(rows: list[Example]) -> None:
    """Every reworded copy has the labels of its row and changes its last user message only;
    autocomplete rows keep their final character (a prefix's end is its evidence)."""
    config = AugmentConfig(toggle_final_mark=1.0, please=0.5, emoji_after=0.5, emoji_before=0.5)
    rng = random.Random(3)
    for ex in rows:
        view = replace(ex.view, messages=(("system", "Be brief."), *ex.view.messages))
        ex = replace(ex, view=view)
        out = reword(ex, rng, config)
        assert (out.task, out.risk, out.jailbreak, out.pii, out.lang, out.source) == (
            ex.task,
            ex.risk,
            ex.jailbreak,
            ex.pii,
            ex.lang,
            ex.source,
        )
        assert out.view.messages[:-1] == ex.view.messages[:-1]
        assert out.view.messages[-1][0] == "user"
        old, new = ex.view.messages[-1][1].rstrip(), out.view.messages[-1][1]
        if ex.task == "autocomplete":  # its end is kept, an emoji may follow it
            assert new.endswith(old) or new.rsplit(" ", 1)[0].endswith(old)
        else:  # the final mark is always toggled here
            assert new != ex.view.messages[-1][1]


def test_augment_is_deterministic_and_keeps_the_rows_first(rows: list[Example]) -> None:
    one, two = augment(rows, seed=13), augment(rows, seed=13)
    assert one == two
    assert one[: len(rows)] == rows
    assert augment(rows, seed=14) != one
    texts = {r.view.messages[-1][1] for r in rows}
    reworded = [ex for ex in one[len(rows) :] if ex.view.messages[-1][1] not in texts]
    assert 0.3 < len(reworded) / (len(one) - len(rows)) < 0.95


def test_rewording_does_not_change_the_structure_drawn(rows: list[Example]) -> None:
    """Rewording draws from its own stream: system prompts, history, tools and response formats
    of the copies are those drawn without it."""
    plain = augment(
        rows, 13, AugmentConfig(toggle_final_mark=0, please=0, emoji_after=0, emoji_before=0)
    )
    worded = augment(rows, 13)
    assert len(plain) == len(worded)
    for a, b in zip(plain, worded, strict=True):
        assert a.view.messages[:-1] == b.view.messages[:-1]
        assert (a.view.tool_names, a.view.response_format) == (
            b.view.tool_names,
            b.view.response_format,
        )
