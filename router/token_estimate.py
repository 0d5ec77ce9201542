"""How many tokens a text is, estimated from its characters by script, without a tokenizer.

The estimate guards the cost ceiling and the context fit, so it errs on the side of counting a
little too many. It runs on every request: an ASCII text (`str.isascii` reads a flag in CPython)
costs one C-speed pass over its bytes, which counts its lower-case letters and spaces apart
from the rest, and two over that rest (short in prose), which count its capitals and digits:
letters and spaces are four a token, as in English prose, a digit is one, every other
character 0.55 (punctuation, brackets, line breaks). A text whose capitals are over an eighth of
it (base64, not prose nor most code) is read once more, for its case changes (a lower-case
letter followed by a capital), 2.5 tokens more each. `python -m bench.prompt_estimate` times it
on 4,000-token prompts (English, 21,200 characters, 13 µs on a slow 2-core VM).

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
characters a token, whatever they were, JSON was 0.89 and Python 0.83. English is 4.47
characters a token in cl100k_base.

Every other character counts its own weight, read from a table of the 65,536 UTF-16 code units
(`token_weights.bin`, zlib-compressed, one byte each in twentieths of a token: 20 KB) generated
offline by `python -m bench.token_weights` from cl100k_base, which litellm ships (the router
never tokenizes): what cl100k_base takes for the character in synthetic running text of its kind
(words of its script's letters and marks, Latin letters inside English words, combining marks
after English letters, symbols among English words, digits in runs, box drawing in tables),
times 1.1 (that script's docstring tells how). cl100k_base has tokens of one or more characters
for the letters of widely written scripts and none for most others, whose letters it writes byte
by byte, two or three tokens each, and the weights follow: Persian, Arabic, Cyrillic and Greek
common letters 1.0-1.3, common Chinese characters 1.1-1.5, kana 1.2-1.4, Latin letters with accents
1.0-3.0 (é 1.25, ạ 1.5, rarer ones near 3), Devanagari 1.2-2.3, other Indic scripts, Georgian,
Armenian and Thai 2.2-2.5, Ethiopic, Cherokee, Yi, Canadian syllabics, Mongolian, Hangul jamo,
Braille and Arabic presentation forms 3.2-3.4, Hangul syllables 1.1-3.4 (common ones 1.1-1.3),
rare ideographs 2.2-3.4, a combining mark 2.9 (it splits the word it sits in), curly quotes,
dashes, → and the minus sign 0.8-1.05, emoji symbols and most arrows and operators 1.7-3.5
(✅ 2.0, ⚠ 3.15, ∈ 1.7: ` ∈` is one token), box-drawing lines 0.45-1.05 (a run of `─` is four a
token) and their corners 1.6-2.4, private-use and unassigned code points 2.2-3.3. A character
beyond U+FFFF (two code units) counts its block of 1,024 code points, the weight of its high
surrogate (its low surrogate weighs 0): emoji 2.85-3.05 (3 tokens in cl100k_base for 1,161 of
the 1,309 emoji of the main blocks, 2 for most of the rest, and no more in the sequences
measured: skin tones, flags, joined families), mathematical letters 3.3, CJK extension B 4.4 (4
tokens each), the tags of a subdivision flag 4.85. A lone surrogate counts as its code unit.

1.2 tokens for every non-ASCII character but emoji and a few symbol blocks (the rule before)
counted texts of many scripts at 0.41-0.64 of cl100k_base's count (Amharic, Cherokee, Yi,
Inuktitut, Mongolian, decomposed Korean, Arabic presentation forms 0.41-0.42, rare ideographs
0.46, Braille and stacked combining marks 0.54, Lao, Sinhala, Armenian, Tibetan, Burmese,
Georgian, full-width ASCII, Persian digits and the Dravidian and other Indic scripts 0.56-0.64),
so that a Georgian prompt already past a 4,000-token context window passed the fit check; now
1.08-1.23 (samples of `tests/unit/test_token_estimate.py`). Khmer, Tamil, Bengali, Cantonese,
traditional Chinese, Vietnamese (decomposed or not), Yoruba and decomposed French went from
0.68-0.90 to 0.97-1.25; the project's Persian prompts from 0.90 at the least, 1.11 at the 5th
percentile and 1.32 in the median to 1.01, 1.16 and 1.30. Random text of a script has few of the
multi-character tokens its real words have, so the widely written scripts are counted over:
Persian 1.33 (1.39 before), Arabic 1.34 (1.43), Hebrew 1.21 (1.11), Greek 1.18 (1.15), Hindi
1.18 (1.04), Thai 1.35 (1.29), Chinese 1.34 (1.12), Japanese 1.33 (1.14), Korean 1.40 (1.14),
Russian 2.18 (2.35), Ukrainian 1.79 (1.93): at 1.0 instead of 1.1, the scripts without such
tokens came out at 0.99-1.07. Latin-script languages other than English stay a little under,
0.87-0.96 (Hungarian, Turkish, Icelandic, Polish; 0.82-0.91 before), for their ASCII letters,
three a token in cl100k_base where the ASCII rate counts four. Emoji-heavy texts are counted
1.04-1.31 (1.01-1.45 before), texts of the Basic Multilingual Plane's symbols 0.97-1.31
(1.13-1.75 before, when every emoji-block symbol, arrow and operator, and any U+2000-U+2FFF
symbol in a text holding an emoji, counted 3): a math line of one-letter variables
(`A ∩ B ⊆ A ∪ B`) stays a little under, each of its letters a token in cl100k_base and a
quarter at the ASCII rate. o200k_base takes 0.3-0.7 tokens a character for Persian, CJK, Hindi
and Arabic (measured once with the same files), which the estimate overcounts 2-4x; the legacy
Claude tokenizer 1.19 a Persian letter, about what the estimate counts. Against that tokenizer
(litellm's `anthropic_tokenizer.json`) the estimate is under for about half of the project's
prompts (an audit of 2026-12-07: 452 of 932 workload prompts, the lowest at 0.87, the 5th
percentile 0.92-0.93; 1% under over all 932 joined): the fit check's margin of 16 tokens and 3%
of the prompt covers the 1% of a long prompt, and 13% only of a prompt under about 150 tokens, so
a Claude deployment may be sent a mid-sized prompt that ends just past its window (a 400
`context_length_exceeded` from the provider, failed over like any refusal of the request).

A non-ASCII text costs one C-speed encode to UTF-16 and one numpy gather and sum over a table of
65,536 64-bit words, each packing a code unit's weight (ASCII characters at the ASCII rates
above) with whether it is an ASCII capital and whether it is ASCII, so that the ASCII characters
count as in an ASCII text without being read apart; only a text of many capitals is encoded once
more, for its case changes. `python -m bench.prompt_estimate` (slow 2-core VM, best of 15
blocks): Persian 5,500 characters 14.1 µs, Chinese 3,400 7.7 µs, English with emoji 14,000 25.5
µs (22.0, 11.6 and 39-41 µs with the 1.2 rate: an ASCII encode, the ASCII counts and a regular
expression searching for emoji symbols).
"""

from __future__ import annotations

import string
import zlib
from pathlib import Path

import numpy as np

# ASCII letters and spaces (English prose is 4.47 characters a token in cl100k_base, see above)
WORD_CHARS_PER_TOKEN = 4
# A lower-case letter followed by an upper-case one: more in base64, hex and minified code
TOKENS_PER_CASE_CHANGE = 2.5
# An ASCII digit: cl100k_base cuts numbers into runs of at most three digits (see above)
TOKENS_PER_ASCII_DIGIT = 1.0
# Every other ASCII character: punctuation, brackets, line breaks, tabs (see above)
TOKENS_PER_ASCII_SIGN = 0.55
# The weight table's unit: its bytes are twentieths of a token (see above)
UNITS_PER_TOKEN = 20
# Each UTF-16 code unit's weight, generated by `python -m bench.token_weights` (see above)
WEIGHTS_FILE = Path(__file__).resolve().parent / "token_weights.bin"
_LOWER_AND_SPACE = (string.ascii_lowercase + " ").encode()
_UPPER = string.ascii_uppercase.encode()
_DIGITS = string.digits.encode()
# Each ASCII byte as its class, `a` lower-case, `A` upper-case, `.` anything else: read only in a
# text of many capitals, whose case changes (`aA`) are then counted
_CASES = bytes(ord("a") if chr(b) in string.ascii_lowercase
               else ord("A") if chr(b) in string.ascii_uppercase else ord(".")
               for b in range(256))
# Each code unit as three counts packed in 64 bits, summed at once: its weight in twentieths of
# a token (bits 0-25: the ASCII rates for an ASCII character, the table's for any other),
# whether it is an ASCII capital (bits 26-43) and whether it is ASCII (bits 44-61); the sums of
# up to `_CHUNK` code units (255 twentieths each at most) stay within their fields
_CHUNK = (1 << 18) - 1
_UPPER_SHIFT = 26
_ASCII_SHIFT = 44
_FIELD = (1 << 18) - 1


def _packed_weights() -> np.ndarray:
    weights = np.frombuffer(zlib.decompress(WEIGHTS_FILE.read_bytes()), np.uint8)
    packed = weights.astype(np.uint64)
    for b in range(128):
        char = chr(b)
        rate = (1 / WORD_CHARS_PER_TOKEN if char.isalpha() or char == " "
                else TOKENS_PER_ASCII_DIGIT if char.isdigit() else TOKENS_PER_ASCII_SIGN)
        packed[b] = (round(rate * UNITS_PER_TOKEN) + (char.isupper() << _UPPER_SHIFT)
                     + (1 << _ASCII_SHIFT))
    return packed


_PACKED = _packed_weights()


def text_tokens(text: str) -> float:
    """The estimated token count of `text` (fractional: sum them, then round down)."""
    if text.isascii():
        return _ascii_tokens(text.encode())
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), np.uint16)
    weight = upper = ascii_chars = 0
    for start in range(0, len(units), _CHUNK):
        packed = int(_PACKED.take(units[start:start + _CHUNK], mode="clip").sum())
        weight += packed & ((1 << _UPPER_SHIFT) - 1)
        upper += (packed >> _UPPER_SHIFT) & _FIELD
        ascii_chars += packed >> _ASCII_SHIFT
    tokens = weight / UNITS_PER_TOKEN
    if upper * 8 > ascii_chars:
        cases = text.encode("ascii", "ignore").translate(_CASES)
        tokens += cases.count(b"aA") * TOKENS_PER_CASE_CHANGE
    return tokens


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


def utf8_tokens(data: bytes) -> float:
    """`text_tokens` of UTF-8 bytes (serialised JSON: tool schemas, tool call arguments), decoded
    only when not ASCII (`bytes.isascii` is one C-speed scan)."""
    if data.isascii():
        return _ascii_tokens(data)
    return text_tokens(data.decode())
