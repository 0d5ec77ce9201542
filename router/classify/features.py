"""Turn a request view into the string features the linear models score.

The same function serves training (through scikit-learn's vectorizer, with an identity
analyzer) and serving (through `linear.LinearModel`), so the two cannot drift apart. Features
are namespaced strings: `w:` words and `b:` word bigrams of the last user message, `c:` character
n-grams of its start, `sys:` words of the system prompt, `tool:` words of declared tool names,
and `s:` structure (message count and roles, response_format, code fences, length, script,
how the text starts and ends). Text is read as the rules read it, without invisible format
characters (`detectors.visible`: one definition for both), so a zero-width space sprinkled
through a prompt changes no feature. Long messages are read through a window (their head and
their tail), so the cost does not grow with the prompt; detectors that must see everything live
in `detectors` and `pii`.
"""

from __future__ import annotations

import itertools
import math
import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

from router.classify.detectors import last_user_text, visible
from router.classify.spelling import ARABIC_KEYBOARD, PRESENTATION_FORMS, PRESENTATION_RANGES
from router.classify.tools import CONSEQUENTIAL_VERBS, MUTATING_VERBS, identifier_words
from router.classify.types import RequestView

_WORD: Final = re.compile(r"\w+|[^\w\s]")
_DIGIT: Final = re.compile(r"\d")
# Persian and Arabic letters, their presentation forms among them (`spelling.PRESENTATION_FORMS`)
_PERSIAN: Final = re.compile(f"[\u0600-\u06ff{PRESENTATION_RANGES}]")
_LATIN: Final = re.compile(r"[A-Za-z]")
_CODE_SYMBOLS: Final = "=(){}[];_<>#/\\*`'\""
_CODE_SYMBOL_BYTES: Final = _CODE_SYMBOLS.encode("ascii")  # distinct characters (tested)
_ASCII_DIGITS: Final = b"0123456789"
_NUMBER: Final = ("", "#", "##", "###", "####")
_ASCII_DIGIT: Final = re.compile(r"[0-9]")
# `shape_tokens`: bucket edges (`_bucket` counts the edges <= the value) and token strings
_LEN_EDGES: Final = tuple(2**e for e in (3, 5, 6, 7, 8, 9, 10, 11, 12, 13))  # on n + 1
_LINE_EDGES: Final = (1, 2, 4, 8, 16, 64)
_DIGIT_EDGES: Final = (0.01, 0.05, 0.15, 0.3)
_SYMBOL_EDGES: Final = (0.01, 0.03, 0.06, 0.1, 0.2)
_LEN_TOKENS: Final = tuple(f"s:len={i}" for i in range(len(_LEN_EDGES) + 1))
_LINE_TOKENS: Final = tuple(f"s:lines={i}" for i in range(len(_LINE_EDGES) + 1))
_DIGIT_TOKENS: Final = tuple(f"s:digits={i}" for i in range(len(_DIGIT_EDGES) + 1))
_SYMBOL_TOKENS: Final = tuple(f"s:symbols={i}" for i in range(len(_SYMBOL_EDGES) + 1))
_SCRIPT_TOKENS: Final = {k: f"s:script={k}" for k in ("fa", "mixed", "latin", "other")}
_CLASS_NAMES: Final = ("digit", "latin", "alpha", "sym", *"?؟.!:;,)]}\"'`")
# `structure_tokens`
_NMSG_EDGES: Final = (2, 3, 5, 9)
_TOOLS_EDGES: Final = (1, 2, 5)
_NMSG_TOKENS: Final = tuple(f"s:nmsg={i}" for i in range(len(_NMSG_EDGES) + 1))
_TOOLS_TOKENS: Final = tuple(f"s:tools={i}" for i in range(len(_TOOLS_EDGES) + 1))
_ROLES: Final = ("system", "developer", "user", "assistant", "tool", "function", "none")
_LAST_TOKENS: Final = {r: f"s:last={r}" for r in _ROLES}
_RF_TOKENS: Final = {f: f"s:rf={f}" for f in ("text", "json_object", "json_schema", "none")}
_START_TOKENS: Final = {k: f"s:start={k}" for k in _CLASS_NAMES}
_END_TOKENS: Final = {k: f"s:end={k}" for k in _CLASS_NAMES}
# Arabic letter forms folded into their Persian forms; tatweel removed; presentation forms (the
# shaped letters of text copied out of a PDF) as the letters they present, folded likewise (no
# training prompt holds one, so the shipped model's features are unchanged). ZWNJ is not here:
# it is one of `detectors.visible`'s invisible characters, gone before the text is normalised.
_LETTER_FOLD: Final = str.maketrans({**ARABIC_KEYBOARD, "\u0640": ""})
_FOLD: Final = {**_LETTER_FOLD, **str.maketrans(
    {glyph: letters.translate(_LETTER_FOLD) for glyph, letters in PRESENTATION_FORMS.items()})}
_DIGITS: Final = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")
# Only the characters that `_FOLD` or `_DIGITS` change: a regex run of them is found fast.
_FOLDABLE: Final = re.compile(f"[يكىة\u0640۰-۹٠-٩{PRESENTATION_RANGES}]+")


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """Which features to extract and how much of a long message to read."""

    head_chars: int = 400
    tail_chars: int = 150
    word_bigrams: bool = True
    char_ngrams: tuple[int, int] | None = None
    char_chars: int = 200
    system_chars: int = 300


def window(text: str, head: int, tail: int) -> str:
    """The head and tail of `text` joined by a newline, or all of it when short enough."""
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + text[len(text) - tail :]


def visible_head(text: str, n: int) -> str:
    """The first `n` characters of `visible(text)`, reading no more of `text` than it needs
    (a long system prompt costs what its head costs)."""
    if text.isascii():
        return text[:n]
    end = n
    head = visible(text[:end])
    while len(head) < n and end < len(text):
        end *= 2
        head = visible(text[:end])
    return head[:n]


def normalize(text: str) -> str:
    """Lower case, Persian letter forms folded, Eastern digits made ASCII (of visible text:
    `visible` runs first)."""
    lowered = text.lower()
    return lowered if lowered.isascii() else _FOLDABLE.sub(_fold, lowered)


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


def text_words(text: str, config: FeatureConfig) -> tuple[str, list[str]]:
    """The normalised window of one message and its words (all-digit words bucketed by
    length), from which `text_tokens` makes its `w:`, `b:` and `c:` features. `text` is
    visible text (`detectors.visible`): `features` and `feature_parts` pass it so."""
    norm = normalize(window(text, config.head_chars, config.tail_chars))
    words = _WORD.findall(norm)
    if not norm.isascii() or _ASCII_DIGIT.search(norm) is not None:
        # only a text with a digit can have an all-digit word (`str.isdigit`: any script)
        words = [w if not w.isdigit() else _NUMBER[min(len(w), 4)] for w in words]
    return norm, words


def char_tokens(norm: str, config: FeatureConfig) -> list[str]:
    """Character n-gram features of the start of a normalised window (none unless configured)."""
    if config.char_ngrams is None:
        return []
    lo, hi = config.char_ngrams
    head = " " + " ".join(norm[: config.char_chars].split()) + " "
    out: list[str] = []
    for n in range(lo, hi + 1):
        out.extend(["c:" + head[i : i + n] for i in range(len(head) - n + 1)])
    return out


def text_tokens(text: str, config: FeatureConfig) -> list[str]:
    """Word, bigram and character n-gram features of (a window of) one message."""
    norm, words = text_words(text, config)
    out = ["w:" + w for w in words]
    if config.word_bigrams:
        out.extend([f"b:{a} {b}" for a, b in itertools.pairwise(words)])
    out.extend(char_tokens(norm, config))
    return out


def shape_tokens(text: str) -> list[str]:
    """Structure of the message: length, lines, fences, script, digits, symbols, ends.

    The token strings are precomputed (`_SHAPE`); the buckets are `bisect` over the same edges
    (the length edges as integer powers of two: `log2(n + 1) < e` exactly when
    `n + 1 < 2 ** e`, tested for every length).
    """
    stripped = text.strip()
    n = len(stripped)
    sample = stripped[:400]
    size = max(1, len(sample))
    if sample.isascii():
        # counted as the bytes `translate` deletes (one C pass each)
        raw = sample.encode("ascii")
        digits = len(raw) - len(raw.translate(None, _ASCII_DIGITS))
        symbols = len(raw) - len(raw.translate(None, _CODE_SYMBOL_BYTES))
        script = "latin" if _LATIN.search(sample) is not None else "other"
    else:
        digits = len(_DIGIT.findall(sample))
        symbols = sum(map(sample.count, _CODE_SYMBOLS))
        script = script_of(sample)
    out = [
        _LEN_TOKENS[bisect_right(_LEN_EDGES, n + 1)],
        _LINE_TOKENS[bisect_right(_LINE_EDGES, stripped.count("\n"))],
        _SCRIPT_TOKENS[script],
        _DIGIT_TOKENS[bisect_right(_DIGIT_EDGES, digits / size)],
        _SYMBOL_TOKENS[bisect_right(_SYMBOL_EDGES, symbols / size)],
    ]
    if n:
        out += [_START_TOKENS[_char_class(stripped[0])], _END_TOKENS[_char_class(stripped[-1])]]
    # `"```" in text` from the first backtick on: a one-character `find` runs at memchr speed,
    # a three-character one reads a long text at about 1 ns a character
    tick = text.find("`")
    if tick != -1 and text.find("```", tick) != -1:
        out.append("s:fence")
    return out


def shape_tokens_reference(text: str) -> list[str]:
    """`shape_tokens` computed step by step (kept to test it against)."""
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
    messages = view.messages
    last = messages[-1][0] if messages else "none"
    rf = view.response_format if view.response_format is not None else "none"
    out = [
        _NMSG_TOKENS[bisect_right(_NMSG_EDGES, len(messages))],
        _LAST_TOKENS.get(last) or f"s:last={last}",
        _RF_TOKENS.get(rf) or f"s:rf={rf}",
        _TOOLS_TOKENS[bisect_right(_TOOLS_EDGES, len(view.tool_names))],
    ]
    if any(role == "assistant" for role, _ in messages):
        out.append("s:history")
    for role, text in messages:
        if role in ("system", "developer"):
            norm = normalize(visible_head(text, config.system_chars))
            out.append("s:system")
            out.extend(["sys:" + w for w in _WORD.findall(norm) if not w.isdigit()])
            break
    # Any-word verb flags, as the shipped model was trained on them; the side-effect rule that
    # sets the `side_effects` signal reads names verb-first (`tools.tool_is_consequential`).
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
    text = visible(last_user_text(view))
    return text_tokens(text, config) + shape_tokens(text) + structure_tokens(view, config)


def feature_parts(
    view: RequestView, config: FeatureConfig, user_text: str | None = None
) -> tuple[list[str], list[str]]:
    """`features` in two parts, for serving: the words of the last user message, and every
    other feature string (character n-grams, shape, structure). `features` is the `w:` token of
    each word, then the `b:` token of each pair of neighbouring words (when
    `config.word_bigrams`), then the other strings; `linear.LinearModel.predict_parts` looks
    words and word pairs up without building those strings. `user_text`, when given, is
    `visible(last_user_text(view))` computed by the caller (the classifier needs it anyway),
    so a long non-ASCII prompt is not read twice for it."""
    text = user_text if user_text is not None else visible(last_user_text(view))
    norm, words = text_words(text, config)
    return words, char_tokens(norm, config) + shape_tokens(text) + structure_tokens(view, config)
