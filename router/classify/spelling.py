"""One spelling of what people write several ways, for the rules (`detectors`, `pii`) to read.

The same card number, phone number, e-mail address or Persian phrase reaches the router in
several spellings that the rules' patterns would each have to list:

* **digits** of any script: Persian and Arabic-Indic (`۰۹۱۲`), Devanagari, full-width (`４１１１`,
  as Japanese input methods type them), every Unicode decimal digit of the Basic Multilingual
  Plane;
* **spaces**: the no-break space (U+00A0, which word processors put inside numbers), the narrow
  no-break space (U+202F, French thousands), thin, figure, ideographic and the other space
  separators;
* **dashes**: hyphen (U+2010), non-breaking hyphen, figure, en and em dashes, the minus sign
  and their small and full-width forms;
* **full-width ASCII** (`＠`, `．`, `Ａ`), typed so by East Asian input methods;
* **Arabic-keyboard Persian**: `ي`, `ى` and `ك` for Persian `ی` and `ک`, `ة` for `ه`, and the
  tatweel (`ـ`, a letter stretched) left out, as the model's features read them
  (`features._FOLD`);
* **Arabic short vowels and other diacritics** (harakat, U+064B-U+065F, and the superscript
  alef U+0670) left out: Persian is written without them, and a fatha in `بَگیر` or the ezafe
  kasra in `دستوراتِ قبلی` hid the phrase from its rule;
* **Arabic presentation forms** (`PRESENTATION_FORMS`): the shaped letters (initial, medial,
  final, isolated; ligatures) that text copied out of a PDF is often made of, read as the
  letters they present. The model's features fold them too (`features.normalize`).

`rule_spelling(text)` maps each of those characters to its one spelling (ASCII where there is
one), character for character except the tatweel and the diacritics, which are dropped, and
the ligatures, which become their letters. Without it a card number written with en dashes or
no-break spaces, a phone number in full-width digits, or a Persian jailbreak phrase typed on an
Arabic keyboard passed every rule: low risk, cached, sent to a model without zero data
retention. The model does not read this text: its features fold what they need, and its
artifact was trained on the text as written.

An ASCII text is returned as is (one flag read); any other is searched once for a character to
fold (a regex character class, a few ns a character) and returned as is when it holds none.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import numpy as np
import numpy.typing as npt

# Below this many characters `str.translate` is cheaper than the numpy mapping.
_NUMPY_MIN_CHARS: Final = 2000
_TATWEEL: Final = 0x0640
# The space separators (Unicode category Zs) but the space itself (tested against the category)
_SPACES: Final = (
    "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u202f\u205f\u3000"
)
_DASHES: Final = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
ARABIC_KEYBOARD: Final = {"ي": "ی", "ى": "ی", "ك": "ک", "ة": "ه"}
# Dropped: the tatweel and the Arabic diacritics (harakat, U+064B-U+065F; superscript alef).
_DROPPED: Final = (_TATWEEL, *range(0x064B, 0x0660), 0x0670)


# The Arabic presentation forms' blocks, as a regex character class's ranges.
PRESENTATION_RANGES: Final = "\ufb50-\ufdff\ufe70-\ufefc"


def _presentation_forms() -> dict[str, str]:
    """Each Arabic presentation form (`PRESENTATION_RANGES`) as the letters it presents:
    its NFKC form, a spacing vowel's without its space. Written so, a Persian jailbreak phrase
    passed its rule and the model's task accuracy on the Persian test prompts fell from 207 to
    135 of 208 (the multilingual audit of 2026-12-07); no training prompt holds one."""
    forms = {}
    for code in (*range(0xFB50, 0xFE00), *range(0xFE70, 0xFEFD)):
        glyph = chr(code)
        letters = unicodedata.normalize("NFKC", glyph).strip()
        if letters != glyph:
            forms[glyph] = letters
    return forms


PRESENTATION_FORMS: Final = _presentation_forms()


def _spellings() -> dict[int, str]:
    """Every code point of the Basic Multilingual Plane that `rule_spelling` changes, and what
    it becomes ("" for the tatweel)."""
    out: dict[int, str] = {}
    for code in range(0x80, 0x10000):
        if 0xD800 <= code < 0xE000:
            continue
        char = chr(code)
        if char.isdecimal():
            out[code] = str(unicodedata.decimal(char))
    for space in _SPACES:
        out[ord(space)] = " "
    for dash in _DASHES:
        out[ord(dash)] = "-"
    for code in range(0xFF01, 0xFF5F):  # full-width ASCII: `!` to `~`
        out[code] = chr(code - 0xFEE0)
    out.update({ord(k): v for k, v in ARABIC_KEYBOARD.items()})
    dropped = "".join(map(chr, _DROPPED))
    for glyph, letters in PRESENTATION_FORMS.items():  # spelled as the letters would be
        out[ord(glyph)] = "".join(out.get(ord(c), c) for c in letters if c not in dropped)
    for code in _DROPPED:
        out[code] = ""
    return out


_SPELLINGS: Final = _spellings()
_TRANSLATION: Final = {code: (value or None) for code, value in _SPELLINGS.items()}


def _character_class(codes: list[int]) -> str:
    """A regex character class of the code points, as ranges."""
    codes = sorted(codes)
    ranges: list[tuple[int, int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    body = "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in ranges
    )
    return f"[{body}]"


_FOLDABLE: Final = re.compile(_character_class(list(_SPELLINGS)))


def _unit_table() -> npt.NDArray[np.uint16]:
    """`table[u]`: the UTF-16 code unit that BMP unit `u` becomes, where it becomes one (itself
    when unchanged; those dropped or spelled as several are not mapped here)."""
    table = np.arange(1 << 16, dtype=np.uint16)
    for code, value in _SPELLINGS.items():
        if len(value) == 1:
            table[code] = ord(value)
    return table


_UNITS: Final = _unit_table()
# `table[u]`: how BMP unit `u` is spelled when not one for one: `_DROPPED_UNIT` (the tatweel,
# diacritics, common in Persian as in `حتماً` and `خانهٔ`; a spacing vowel) or `_SEVERAL` letters
# (ligatures: rare, so a long text holding one is mapped by `str.translate` instead).
_ONE, _DROPPED_UNIT, _SEVERAL = 0, 1, 2


def _unit_kinds() -> npt.NDArray[np.uint8]:
    table = np.full(1 << 16, _ONE, dtype=np.uint8)
    for code, value in _SPELLINGS.items():
        if len(value) != 1:
            table[code] = _DROPPED_UNIT if not value else _SEVERAL
    return table


_KINDS: Final = _unit_kinds()


def rule_spelling(text: str) -> str:
    """`text` with each character of several spellings in its one spelling (see the module)."""
    if text.isascii() or _FOLDABLE.search(text) is None:
        return text
    if len(text) < _NUMPY_MIN_CHARS:
        return text.translate(_TRANSLATION)
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    kinds = _KINDS.take(units)
    if kinds.any():
        if kinds.max() == _SEVERAL:
            return text.translate(_TRANSLATION)
        units = units[kinds == _ONE]
    folded: npt.NDArray[np.uint16] = _UNITS.take(units)
    return folded.astype("<u2", copy=False).tobytes().decode("utf-16-le", "surrogatepass")

