"""How many tokens a text is, estimated from its characters by script, without a tokenizer.

The estimate guards the cost ceiling and the context fit, so it errs on the side of counting a
little too many. It runs on every request: an ASCII text (`str.isascii` reads a flag in CPython)
costs one C-speed pass over its bytes, which counts its lower-case letters and spaces apart
from the rest, and two over that rest (short in prose), which count its capitals and digits:
letters and spaces are four a token, as in English prose, a digit is one, every other
character 0.55 (punctuation, brackets, line breaks). A text whose capitals are over an eighth of
it (base64, not prose nor most code) is read once more, for its case changes (a lower-case
letter followed by a capital), 2.5 tokens more each. Any other text costs one C-speed encode
first, which sets its ASCII characters (counted so) apart from the others (1.2 tokens each,
whatever their script). Telling two-byte scripts (Persian, Arabic, Cyrillic) from three-byte
ones (CJK, Indic) as well took a second encode, about doubling the cost, to price Persian
nearer its 0.9: not done. `python -m bench.prompt_estimate` times it on 4,000-token prompts
(English 16 µs).

Code, JSON, tables and pasted data are dense in characters other than letters, which
cl100k_base takes one token for in ones and twos, and numbers in runs of at most three digits;
base64 and minified code it cuts into pieces of two or three characters, where prose is four or
five. Four characters a token, whatever they were, came out under cl100k_base's count for
most of them, where a tool's JSON schema is often most of an agent's prompt. The rates were
fitted (then rounded) on 3,000-character windows of files of each kind (a venv's packages), on
the project's prompts and on base64 and hex (`python -m bench.estimate_calibration`; its
JavaScript windows are mostly minified bundles), to bring each kind's 5th percentile of
estimate / cl100k_base near 1 without raising prose. Against 0.6 tokens for every ASCII
character but letters and spaces (the rule before, for a day), that 5th percentile went from
0.43 to 1.07 for base64, 0.80 to 1.22 for hex, 0.72 to 0.98 for CSV, 0.92 to 0.99 for
JavaScript (mostly minified), 0.85-0.86 to 0.89-0.94 for C, 0.85 to 0.91 for math prompts and
0.97 to 0.98 for the other English prompts (their median 1.20, their 95th percentile 1.43, both
unchanged); JSON 1.17-1.18 (median 1.21), Python 1.16 and YAML 1.00 stay over. Against four
characters a token, whatever they were, JSON was 0.89 and Python 0.83.

Calibrated offline against the tokenizer files litellm ships (cl100k_base, held to in
`tests/unit/test_token_estimate.py`; o200k_base and the legacy Claude tokenizer measured once
with the same files) on the project's English and Persian prompts and on a few CJK, Hindi and
Arabic sentences written for it (the project's data has none). Per
non-ASCII character cl100k_base, the most expensive of the current OpenAI tokenizers, takes
0.90 tokens for Persian (one prompt in a hundred 1.16), 1.05-1.07 for Chinese, Japanese and
Korean, 1.15 for Hindi, 0.83 for Arabic; English is 4.47 characters a token. o200k_base takes
0.3-0.7 there, which the estimate overcounts 2-4x; the legacy Claude tokenizer takes 1.19 per
Persian letter, about what the estimate counts.

Emoji cost more: a character beyond U+FFFF (an emoji, a skin tone, a flag's regional indicator,
a mathematical letter, a rare CJK ideograph) is 1-3 tokens in cl100k_base, o200k_base and the
legacy Claude tokenizer (3 in cl100k_base for 1,161 of the 1,309 emoji of the main blocks), and
no more in the sequences measured (skin tones, flags, joined families); so each is counted as
3. Such a text is rare and CPython tells it apart in O(1) (it stores it at four bytes a
character, `_bytes_per_char`), so only it is read another way: from its UTF-8 form, which
counts its astral characters and the symbols of U+2000-U+2FFF that emoji come with (zero-width
joiners, keycaps, ❤ ✨ ✅ ⚠ ☀: 2-3 tokens each in cl100k_base), also 3.

The emoji blocks of the Basic Multilingual Plane (technical signs U+2300-U+23FF, miscellaneous
symbols and dingbats U+2600-U+27BF, symbols and arrows U+2B00-U+2BFF: ✅ ❌ ✨ ⭐ ⚠ ⏰), the
emoji variation selector U+FE0F and the keycap U+20E3 count 3 in any text, and so do arrows
(U+2194-U+21FF) and mathematical operators (U+2200-U+22FF but the minus sign): cl100k_base
takes 2-3 tokens for 950 of the emoji blocks' 957 printable characters (1 for ★ ☆ ♥ ♪ ✔ and
two more), 4 for ⚠️, 5 for a keycap like 1️⃣, and 2-3 for every arrow and operator of those
ranges. Emoji symbols are frequent where a model's own answers come back as history (check
lists, warnings), operators in math prompts; at 1.2 a cost ceiling passed a prompt of them at
0.4-0.7 of its tokens. A text CPython stores at one byte a character (Latin-1) cannot hold one;
any other is searched for them once (about 28 µs for 5,500 Persian characters on a slow 2-core
VM, `python -m bench.prompt_estimate`). The neighbouring characters stay at 1.2: box drawing
and block elements run together in trees, tables and bars (1 token for several), ← ↑ → ↓ and
the minus sign are 1 token, and general punctuation (dashes, curly quotes, the zero-width
non-joiner Persian writes with) 1-2, unless an astral character is there.
"""

from __future__ import annotations

import re
import string
import sys

# ASCII letters and spaces (English prose is 4.47 characters a token in cl100k_base, see above)
WORD_CHARS_PER_TOKEN = 4
# A lower-case letter followed by an upper-case one: more in base64, hex and minified code
TOKENS_PER_CASE_CHANGE = 2.5
# An ASCII digit: cl100k_base cuts numbers into runs of at most three digits (see above)
TOKENS_PER_ASCII_DIGIT = 1.0
# Every other ASCII character: punctuation, brackets, line breaks, tabs (see above)
TOKENS_PER_ASCII_SIGN = 0.55
# cl100k_base per non-ASCII character: Hindi 1.15, CJK 1.05-1.07, Persian 0.90 (see above)
TOKENS_PER_OTHER_CHAR = 1.2
# Beyond U+FFFF (emoji), and U+2000-U+2FFF in a text holding one: at most 3 (see above)
TOKENS_PER_EMOJI_CHAR = 3.0
# `sys.getsizeof` of a compact four-bytes-a-character text, less its characters and terminator
_UCS4_HEADER = sys.getsizeof("\U0001f600") - 2 * 4
# The symbols that count as emoji in any text (see above)
_BMP_SYMBOLS = re.compile(
    "[\u2194-\u21ff\u2200-\u2211\u2213-\u23ff\u2600-\u27bf\u2b00-\u2bff\u20e3\ufe0f]")
_VARIATION_SELECTOR = "\ufe0f".encode()  # beyond U+2FFF, so not among the E2 leads
_LOWER_AND_SPACE = (string.ascii_lowercase + " ").encode()
_UPPER = string.ascii_uppercase.encode()
_DIGITS = string.digits.encode()
# Each ASCII byte as its class, `a` lower-case, `A` upper-case, `.` anything else: read only in a
# text of many capitals, whose case changes (`aA`) are then counted
_CASES = bytes(ord("a") if chr(b) in string.ascii_lowercase
               else ord("A") if chr(b) in string.ascii_uppercase else ord(".")
               for b in range(256))
_NON_ASCII_BYTES = bytes(range(0x80, 0x100))
# Every byte but the UTF-8 lead bytes of U+2000-U+2FFF (E2) and beyond U+FFFF (F0-F4)
_NOT_EMOJI_LEADS = bytes(b for b in range(0x100) if b != 0xE2 and not 0xF0 <= b <= 0xF4)


def text_tokens(text: str) -> float:
    """The estimated token count of `text` (fractional: sum them, then round down)."""
    if text.isascii():
        return _ascii_tokens(text.encode())
    width = _bytes_per_char(text)
    if width >= 4:
        return _emoji_text_tokens(text)
    ascii_part = text.encode("ascii", "ignore")
    symbols = len(_BMP_SYMBOLS.findall(text)) if width >= 2 else 0
    return (_ascii_tokens(ascii_part)
            + (len(text) - len(ascii_part) - symbols) * TOKENS_PER_OTHER_CHAR
            + symbols * TOKENS_PER_EMOJI_CHAR)


def _ascii_tokens(data: bytes) -> float:
    """ASCII bytes: letters and spaces four a token, a digit one, every other byte 0.55; in a
    text whose capitals are over an eighth of it (base64, say), 2.5 more for each lower-case
    letter followed by an upper-case one. Prose costs one pass over its bytes and two over
    what is left of them once lower-case letters and spaces are out."""
    rest = data.translate(None, _LOWER_AND_SPACE)
    upper = len(rest) - len(rest.translate(None, _UPPER))
    digits = len(rest) - len(rest.translate(None, _DIGITS))
    signs = len(rest) - upper - digits
    tokens = ((len(data) - signs - digits) / WORD_CHARS_PER_TOKEN
              + digits * TOKENS_PER_ASCII_DIGIT + signs * TOKENS_PER_ASCII_SIGN)
    if upper * 8 > len(data):
        tokens += data.translate(_CASES).count(b"aA") * TOKENS_PER_CASE_CHANGE
    return tokens


def _bytes_per_char(text: str) -> int:
    """The bytes a character CPython stores `text` at (PEP 393: 1 below U+0100, 2 below
    U+10000, 4 beyond), from `sys.getsizeof`, without reading the text: 4 for every text with
    an astral character, 2 or more for every text that may hold a symbol of `_BMP_SYMBOLS`.
    It reads high when CPython also cached the text's UTF-8 form beside it; the caller then
    reads the text and finds no such character, counting it as it would otherwise."""
    return (sys.getsizeof(text) - _UCS4_HEADER) // (len(text) + 1)


def _emoji_text_tokens(text: str) -> float:
    """`text_tokens` of a text that may hold astral characters, from its UTF-8 form in three
    C-speed passes: its ASCII bytes, and its lead bytes of U+2000-U+2FFF (E2) and of astral
    characters (F0-F4), those costing 3 tokens when any astral character is there, and its
    variation selectors U+FE0F (3 in any text). A lone surrogate (ED) counts as any other
    character."""
    data = text.encode("utf-8", "surrogatepass")
    ascii_part = data.translate(None, _NON_ASCII_BYTES)
    leads = data.translate(None, _NOT_EMOJI_LEADS)
    symbols = leads.count(0xE2)
    astral = len(leads) - symbols
    if astral:
        emoji = astral + symbols + data.count(_VARIATION_SELECTOR)
    else:  # a text with no astral character after all: as `text_tokens` counts it
        emoji = len(_BMP_SYMBOLS.findall(text))
    return (_ascii_tokens(ascii_part)
            + (len(text) - len(ascii_part) - emoji) * TOKENS_PER_OTHER_CHAR
            + emoji * TOKENS_PER_EMOJI_CHAR)


def utf8_tokens(data: bytes) -> float:
    """`text_tokens` of UTF-8 bytes (serialised JSON: tool schemas, tool call arguments), decoded
    only when not ASCII (`bytes.isascii` is one C-speed scan)."""
    if data.isascii():
        return _ascii_tokens(data)
    return text_tokens(data.decode())
