"""Structural augmentation of single-message training rows.

The data have no system prompts, no history, few tools and no response_format, yet real
requests do. Copies of rows get such structure so that the structural features are learnt
sensibly: a neutral system prompt or earlier turns say nothing about the task (they are added to
every class alike), while JSON output leans to extraction/classification and declared tools lean
(weakly) to action. Labels never change. Pure: randomness comes in as a seeded `random.Random`.

Copies are also reworded in ways that keep their label (`reword`): the final `.`/`?`/`!`/`؟`
removed or added, a leading "please" (Persian "لطفاً"), an emoji after or before the message.
The data tie such marks to a source rather than a task (CLINC's voice-assistant rows, mostly
`action`, have no final punctuation and often "please"; every Persian chat row ends with `؟`,
no Persian autocomplete row does; no row has an emoji), so without this the model read
"please" as an action and a Persian question without its `؟` as an autocomplete prefix.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from policies.labels import Task
from router.classify.data import Example

SYSTEM_PROMPTS: Final[tuple[str, ...]] = (
    "You are a helpful assistant.",
    "You are a helpful, harmless and honest assistant. Answer concisely.",
    "You are an AI assistant for Acme Corp. Be polite and accurate.",
    "Always answer in the user's language.",
    "You are ChatGPT, a large language model. Knowledge cutoff: 2023-10.",
    "Follow the user's instructions carefully. If unsure, say so.",
    "تو یک دستیار مفید هستی. پاسخ‌ها را کوتاه و دقیق بده.",
    "You are a support agent. Keep a friendly tone and do not make things up.",
)
ASSISTANT_TURNS: Final[tuple[str, ...]] = (
    "Sure, here you go.",
    "Done. Anything else?",
    "I can help with that. Could you give me more details?",
    "Here is what I found.",
    "باشه، انجام شد.",
)
JSON_TASKS: Final[frozenset[Task]] = frozenset({"extraction", "classification"})
FINAL_MARKS: Final = ".?!؟"
EMOJI: Final[tuple[str, ...]] = ("🙂", "😊", "👍", "🙏", "😂", "❤️", "✨", "🤔")
PLEASE: Final[dict[bool, str]] = {False: "please ", True: "لطفاً "}  # keyed by "is Persian"
_PERSIAN: Final = re.compile("[\u0600-\u06ff]")


@dataclass(frozen=True, slots=True)
class AugmentConfig:
    """How often each kind of structure is added to an augmented copy."""

    copy_share: float = 0.5
    system: float = 0.5
    history: float = 0.3
    json_for_json_tasks: float = 0.35
    json_otherwise: float = 0.04
    tools_for_action: float = 0.35
    tools_otherwise: float = 0.08
    # label-preserving rewordings of a copy's last user message (`reword`)
    toggle_final_mark: float = 0.7
    please: float = 0.15
    emoji_after: float = 0.15
    emoji_before: float = 0.1


def _history(rng: random.Random, pool: Sequence[Example]) -> tuple[tuple[str, str], ...]:
    turns: list[tuple[str, str]] = []
    for _ in range(rng.randint(1, 2)):
        other = pool[rng.randrange(len(pool))].view.messages[-1][1][:300]
        turns += [("user", other), ("assistant", rng.choice(ASSISTANT_TURNS))]
    return tuple(turns)


def toggle_final_mark(text: str, rng: random.Random) -> str:
    """`text` without its final `.`/`?`/`!`/`؟`, or with one when it has none (`؟` or `.` after
    Persian, `?`, `.` or `!` otherwise). Trailing whitespace goes either way."""
    stripped = text.rstrip()
    if not stripped:
        return text
    if stripped[-1] in FINAL_MARKS:
        return stripped[:-1].rstrip()
    persian = _PERSIAN.search(stripped) is not None
    return stripped + rng.choice(("؟", ".") if persian else ("?", ".", "!"))


def with_please(text: str) -> str:
    """`text` after "please " ("لطفاً " when it is Persian)."""
    return PLEASE[_PERSIAN.search(text) is not None] + text.lstrip()


def with_emoji(text: str, rng: random.Random, *, before: bool = False) -> str:
    """`text` with an emoji and a space before it, or a space and an emoji after it."""
    emoji = rng.choice(EMOJI)
    return f"{emoji} {text.lstrip()}" if before else f"{text.rstrip()} {emoji}"


def reword(example: Example, rng: random.Random, config: AugmentConfig) -> Example:
    """`example` with its last user message reworded without changing its label, each at its
    `config` rate: the final mark toggled (not in autocomplete rows: a prefix that ends
    mid-sentence is their evidence), "please" put before it, an emoji after and before it."""
    messages = example.view.messages
    if not messages or messages[-1][0] != "user" or not messages[-1][1].strip():
        return example
    text = messages[-1][1]
    if rng.random() < config.toggle_final_mark and example.task != "autocomplete":
        text = toggle_final_mark(text, rng)
    if rng.random() < config.please:
        text = with_please(text)
    if rng.random() < config.emoji_after:
        text = with_emoji(text, rng)
    if rng.random() < config.emoji_before:
        text = with_emoji(text, rng, before=True)
    if text == messages[-1][1]:
        return example
    view = replace(example.view, messages=(*messages[:-1], ("user", text)))
    return replace(example, view=view)


def augment_one(
    example: Example,
    rng: random.Random,
    pool: Sequence[Example],
    tool_pool: Sequence[str],
    config: AugmentConfig,
) -> Example:
    """A copy of `example` with a random system prompt, history, tools and response format."""
    view = example.view
    messages = view.messages
    if rng.random() < config.history:
        messages = _history(rng, pool) + messages
    if rng.random() < config.system:
        messages = (("system", rng.choice(SYSTEM_PROMPTS)), *messages)
    json_p = config.json_for_json_tasks if example.task in JSON_TASKS else config.json_otherwise
    fmt = rng.choice(("json_object", "json_schema")) if rng.random() < json_p else None
    tools = view.tool_names
    tools_p = config.tools_for_action if example.task == "action" else config.tools_otherwise
    if not tools and tool_pool and rng.random() < tools_p:
        tools = tuple(rng.sample(list(tool_pool), k=min(len(tool_pool), rng.randint(1, 4))))
    return replace(
        example,
        view=replace(view, messages=messages, tool_names=tools, response_format=fmt),
    )


def augment(
    examples: Sequence[Example], seed: int, config: AugmentConfig = AugmentConfig()
) -> list[Example]:
    """The examples followed by augmented copies of a random share of them, reworded."""
    rng = random.Random(seed)
    tool_pool = sorted({name for ex in examples for name in ex.view.tool_names})
    copies = [
        augment_one(ex, rng, examples, tool_pool, config)
        for ex in examples
        if rng.random() < config.copy_share
    ]
    # rewording draws from its own stream, so the structure above is what it was without it
    words_rng = random.Random(rng.getrandbits(64))
    return [*examples, *(reword(ex, words_rng, config) for ex in copies)]


def augment_for_eval(examples: Sequence[Example], seed: int) -> list[Example]:
    """Every example with structure added (system prompt, history, tools), for robustness."""
    rng = random.Random(seed)
    tool_pool = sorted({name for ex in examples for name in ex.view.tool_names})
    config = AugmentConfig(system=0.7, history=0.5)
    return [augment_one(ex, rng, examples, tool_pool, config) for ex in examples]
