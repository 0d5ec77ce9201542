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
  (`features._FOLD`).

`rule_spelling(text)` maps each of those characters to its one spelling (ASCII where there is
one), character for character except the tatweel, which is dropped. Without it a card number
written with en dashes or no-break spaces, a phone number in full-width digits, or a Persian
jailbreak phrase typed on an Arabic keyboard passed every rule: low risk, cached, sent to a
model without zero data retention. The model does not read this text: its features fold what
they need, and its artifact was trained on the text as written.

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
_ARABIC_KEYBOARD: Final = {"ي": "ی", "ى": "ی", "ك": "ک", "ة": "ه"}


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
    out.update({ord(k): v for k, v in _ARABIC_KEYBOARD.items()})
    out[_TATWEEL] = ""
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
    """`table[u]`: the UTF-16 code unit that BMP unit `u` becomes (itself when unchanged; the
    tatweel, which is dropped, is taken out before the table is read)."""
    table = np.arange(1 << 16, dtype=np.uint16)
    for code, value in _SPELLINGS.items():
        if value:
            table[code] = ord(value)
    return table


_UNITS: Final = _unit_table()


def rule_spelling(text: str) -> str:
    """`text` with each character of several spellings in its one spelling (see the module)."""
    if text.isascii() or _FOLDABLE.search(text) is None:
        return text
    if len(text) < _NUMPY_MIN_CHARS:
        return text.translate(_TRANSLATION)
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    units = units[units != _TATWEEL] if chr(_TATWEEL) in text else units
    folded: npt.NDArray[np.uint16] = _UNITS.take(units)
    return folded.astype("<u2", copy=False).tobytes().decode("utf-16-le", "surrogatepass")

