"""Turn a request view into the string features the linear models score.

The same function serves training (through scikit-learn's vectorizer, with an identity
analyzer) and serving (through `linear.LinearModel`), so the two cannot drift apart. Features
are namespaced strings: `w:` words and `b:` word bigrams of the last user message, `c:` character
n-grams of its start, `sys:` words of the system prompt, `tool:` words of declared tool names,
and `s:` structure (message count and roles, response_format, code fences, length, script,
how the text starts and ends). Long messages are read through a window (their head and their
tail), so the cost does not grow with the prompt; detectors that must see everything live in
`detectors` and `pii`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Final

from router.classify.detectors import (
    CONSEQUENTIAL_VERBS,
    MUTATING_VERBS,
    identifier_words,
    last_user_text,
)
from router.classify.types import RequestView

_WORD: Final = re.compile(r"\w+|[^\w\s]")
_DIGIT: Final = re.compile(r"\d")
_PERSIAN: Final = re.compile(r"[\u0600-\u06ff]")
_LATIN: Final = re.compile(r"[A-Za-z]")
_CODE_SYMBOLS: Final = "=(){}[];_<>#/\\*`'\""
_NUMBER: Final = ("", "#", "##", "###", "####")
# Arabic letter forms folded into their Persian forms; ZWNJ and tatweel removed.
_FOLD: Final = str.maketrans({"ي": "ی", "ك": "ک", "ى": "ی", "ة": "ه", "\u200c": "", "\u0640": ""})
_DIGITS: Final = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")
# Only the characters that `_FOLD` or `_DIGITS` change: a regex run of them is found fast.
_FOLDABLE: Final = re.compile("[يكىة\u200c\u0640۰-۹٠-٩]+")


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """Which features to extract and how much of a long message to read."""

    head_chars: int = 700
    tail_chars: int = 250
    word_bigrams: bool = True
    char_ngrams: tuple[int, int] | None = None
    char_chars: int = 200
    system_chars: int = 300


def window(text: str, head: int, tail: int) -> str:
    """The head and tail of `text` joined by a newline, or all of it when short enough."""
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + text[len(text) - tail :]


def normalize(text: str) -> str:
    """Lower case, Persian letter forms folded, Eastern digits made ASCII."""
    return _FOLDABLE.sub(_fold, text.lower())


def _fold(match: re.Match[str]) -> str:
    return match.group().translate(_FOLD).translate(_DIGITS)


def _bucket(n: float, edges: tuple[float, ...]) -> int:
    for i, edge in enumerate(edges):
        if n < edge:
            return i
    return len(edges)


def _char_class(ch: str) -> str:
    if ch.isdigit():
        return "digit"
    if ch.isalpha():
        return "latin" if ch.isascii() else "alpha"
    return ch if ch in "?؟.!:;,)]}\"'`" else "sym"


def script_of(text: str) -> str:
    """`fa`, `mixed`, `latin` or `other`, by the letters in `text`."""
    fa = _PERSIAN.search(text) is not None
    latin = _LATIN.search(text) is not None
    if fa:
        return "mixed" if latin and len(_LATIN.findall(text)) > 3 else "fa"
    return "latin" if latin else "other"


def text_tokens(text: str, config: FeatureConfig) -> list[str]:
    """Word, bigram and character n-gram features of (a window of) one message."""
    norm = normalize(window(text, config.head_chars, config.tail_chars))
    words = [w if not w.isdigit() else _NUMBER[min(len(w), 4)] for w in _WORD.findall(norm)]
    out = ["w:" + w for w in words]
    if config.word_bigrams:
        out.extend([f"b:{a} {b}" for a, b in itertools.pairwise(words)])
    if config.char_ngrams is not None:
        lo, hi = config.char_ngrams
        head = " " + " ".join(norm[: config.char_chars].split()) + " "
        for n in range(lo, hi + 1):
            out.extend(["c:" + head[i : i + n] for i in range(len(head) - n + 1)])
    return out


def shape_tokens(text: str) -> list[str]:
    """Structure of the message: length, lines, fences, script, digits, symbols, ends."""
    stripped = text.strip()
    n = len(stripped)
    sample = stripped[:400]
    digits = len(_DIGIT.findall(sample)) / max(1, len(sample))
    symbols = sum(sample.count(ch) for ch in _CODE_SYMBOLS) / max(1, len(sample))
    out = [
        f"s:len={_bucket(math.log2(n + 1), (3, 5, 6, 7, 8, 9, 10, 11, 12, 13))}",
        f"s:lines={_bucket(stripped.count(chr(10)), (1, 2, 4, 8, 16, 64))}",
        f"s:script={script_of(sample)}",
        f"s:digits={_bucket(digits, (0.01, 0.05, 0.15, 0.3))}",
        f"s:symbols={_bucket(symbols, (0.01, 0.03, 0.06, 0.1, 0.2))}",
    ]
    if n:
        out += [f"s:start={_char_class(stripped[0])}", f"s:end={_char_class(stripped[-1])}"]
    if "```" in text:
        out.append("s:fence")
    return out


def structure_tokens(view: RequestView, config: FeatureConfig) -> list[str]:
    """Features of the request around the last user message: roles, system prompt, tools."""
    roles = [role for role, _ in view.messages]
    out = [
        f"s:nmsg={_bucket(len(roles), (2, 3, 5, 9))}",
        f"s:last={roles[-1] if roles else 'none'}",
        f"s:rf={view.response_format if view.response_format is not None else 'none'}",
        f"s:tools={_bucket(len(view.tool_names), (1, 2, 5))}",
    ]
    if "assistant" in roles:
        out.append("s:history")
    for role, text in view.messages:
        if role in ("system", "developer"):
            norm = normalize(text[: config.system_chars])
            out.append("s:system")
            out.extend("sys:" + w for w in _WORD.findall(norm) if not w.isdigit())
            break
    for name in view.tool_names[:16]:
        words = identifier_words(name)
        out.extend("tool:" + w for w in words)
        if any(w in CONSEQUENTIAL_VERBS for w in words):
            out.append("s:tool_consequential")
        elif any(w in MUTATING_VERBS for w in words):
            out.append("s:tool_mutating")
    return out


def features(view: RequestView, config: FeatureConfig) -> list[str]:
    """Every feature string of the request (repeats count)."""
    text = last_user_text(view)
    return text_tokens(text, config) + shape_tokens(text) + structure_tokens(view, config)
