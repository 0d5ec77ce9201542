"""A message none of whose words the model knows gets the default task, not a guess from its
shape: Chinese, Russian and Arabic requests and emoji were mostly `autocomplete` (the
classifier audit of 2026-12-07: 11 of 15 Chinese, 9 of 15 Russian, 10 of 15 Arabic, 10 of 10
emoji)."""

from __future__ import annotations

import pytest

from router.classify import Hints, load_default_classifier, view_from_openai
from router.classify.features import FeatureConfig, text_words
from router.classify.types import Labels


def _labels(text: str, hints: Hints | None = None) -> Labels:
    view = view_from_openai([{"role": "user", "content": text}])
    return load_default_classifier().classify(view, hints or Hints())


@pytest.mark.parametrize(
    "text",
    [
        "今天天气怎么样？",
        "请帮我写一首关于春天的诗",
        "把这句话翻译成英文：我喜欢学习",
        "Какая сегодня погода?",
        "Расскажи анекдот",
        "Привет!",
        "كيف حالك؟",
        "👍",
        "🔥🔥🔥",
        "😂😂",
    ],
)
def test_a_message_of_unknown_words_gets_the_default_task(text: str) -> None:
    labels = _labels(text)
    assert (labels.task, labels.task_source) == ("chat", "default")


def test_one_known_word_lets_the_model_decide() -> None:
    """"Write a quicksort in Python", in Russian: `python` is a word the model knows."""
    labels = _labels("Напиши быструю сортировку на Python")
    assert labels.task_source == "model"
    assert labels.task == "code"


def test_a_task_hint_still_wins() -> None:
    labels = _labels("用Python写一个快速排序", Hints(task="code"))
    assert (labels.task, labels.task_source) == ("code", "hint")


def test_the_rules_still_read_a_message_the_model_cannot() -> None:
    labels = _labels("我的电话是 +86 138 0013 8000", Hints(risk="low"))  # my phone number is
    assert labels.task_source == "default"
    assert "pii" in labels.signals and labels.risk == "high"


@pytest.mark.parametrize("text", ["2+2", "(3+4)*5-2/7=?", "√144 + 3² = ?", "3.14159 * 2.5^2"])
def test_arithmetic_is_left_to_the_model(text: str) -> None:
    """Arithmetic (digits and no letters) is read, as shape features, so it is the model's
    (`math`), not an unread message's default (the re-audit of 2026-12-07: all were `chat`)."""
    labels = load_default_classifier().classify(
        view_from_openai([{"role": "user", "content": text}]), Hints())
    assert labels.task == "math" and labels.task_source == "model"


def test_punctuation_and_numbers_are_not_known_words() -> None:
    """`?`, `!` and the number buckets are in the vocabulary, but say nothing of the task."""
    model = load_default_classifier().model
    _, words = text_words("?! 42 , 2024 !", FeatureConfig())
    assert all(model.vocab.get("w:" + w) is not None for w in words)
    assert not model.knows_a_word(words)
    assert model.knows_a_word(text_words("translate ?", FeatureConfig())[1])
