"""Deterministic detectors of personal data in text: where rules beat statistics.

E-mail addresses, phone numbers (international, North American, Iranian; Persian and
Arabic-Indic digits included), payment cards (Luhn check, and grouped as cards are printed or
named as a card), IBANs (ISO 13616 mod-97 check), US social security numbers and Iranian
national codes (checksum, and written or named as one). Every function is pure and runs
in time linear in the text. Matches are reported by kind and span, never by value, so callers
do not copy personal data into logs. Jailbreak, tool and domain rules live in `detectors`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from router.classify.scan import (
    SCAN_MIN_CHARS,
    TextScan,
    digit_clusters,
    eastern_to_ascii,
    scan,
)

PiiKind = Literal["email", "phone", "card", "iban", "ssn", "national_id"]

_EASTERN_DIGITS: Final = "۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩"
_TO_ASCII: Final = str.maketrans(_EASTERN_DIGITS, "01234567890123456789")
_EASTERN_RUN: Final = re.compile(f"[{_EASTERN_DIGITS}]+")

# The domain ends where its ASCII letters do: Persian text often follows an address with no
# space between them.
_EMAIL: Final = re.compile(
    r"(?<![\w.%+-])[\w.%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)+[A-Za-z]{2,24}"
    r"(?![A-Za-z0-9_-])"
)
# A run of digits with the separators people write inside numbers; each run is then tested
# by the kind-specific patterns below, so the whole text is scanned once.
# It starts with a character class so that the regex engine skips non-digits in a fast loop;
# a leading "+" or "(" is taken back in by `_with_lead`.
_DIGIT_RUN: Final = re.compile(r"\d[\d ().\-]{5,40}\d")
_SSN: Final = re.compile(r"(?<!\d)(\d{3})-(\d{2})-(\d{4})(?!\d)")
_CARD: Final = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_NANP: Final = re.compile(
    r"(?<![\d+])(?:\+?1[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\d)"
)
_INTL: Final = re.compile(r"(?<!\d)\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?!\d)")
_IR_MOBILE: Final = re.compile(r"(?<!\d)(?:\+98|0098|0)[ -]?9\d{2}[ -]?\d{3}[ -]?\d{4}(?!\d)")
# 0, a two-digit area code (11-87; 09 is a mobile's), eight digits: `021-88776655`,
# `02188776655`, `(021) 88776655`, `021 8877 6655` (only the hyphenated form was found before
# the multilingual audit of 2026-12-07)
_IR_LANDLINE: Final = re.compile(r"(?<!\d)(?:\(0[1-8]\d\) ?|0[1-8]\d[ -]?)\d{4}[ -]?\d{4}(?!\d)")
_IR_NATIONAL: Final = re.compile(r"(?<!\d)\d{3}[ -]?\d{6}[ -]?\d(?!\d)")
# About 1 in 11 ten-digit numbers passes the national-code checksum and 1 in 10 numbers of
# 13-19 digits the Luhn check: Unix timestamps, ids in code, log lines, rial prices were
# personal data, each request `high` (the classifier audit of 2026-12-07: 9-11% of such
# prompts, 55% of 8-line logs with timestamps). So a number needs its kind's shape or words:
# a national code written as one (`008-457594-8`) or named near it (کد ملی, شماره ملی, کارت
# ملی, "national ID/code/number"); a card grouped as cards are printed (4-4-4-4, Amex 4-6-5)
# or starting as a payment card does (2-6, ISO/IEC 7812's banking and payment industries:
# Visa, Mastercard, Amex, Discover, UnionPay, JCB, Mir, Iran's Shetab banks) with a word for
# it near it (card, credit, debit, CVV, کارت, ...). Every row of the labelled data with a
# card is grouped, and none holds a national code.
# the printed form (dashes, or the spaces people type for them: "008 457594 8")
_NATIONAL_CODE_FORM: Final = re.compile(r"\d{3}([ -])\d{6}\1\d")
_NATIONAL_CODE_WORDS: Final = re.compile(
    r"کد\s*ملی|شماره\s*ملی|کارت\s*ملی|national\s+(?:id|identity|code|number)"
    r"|\bcode\s+mel+i\b|\bmel+i\s+code\b",
    re.IGNORECASE,
)
_GROUPED_CARD: Final = re.compile(
    r"\d{4}([ -])\d{4}\1\d{4}\1\d{1,4}(?:\1\d{1,3})?|\d{4}([ -])\d{6}\2\d{4,5}"
)
# ... and the words of payment forms and logs: an expiry ("exp 12/26"), the PAN, a payment
# field ("payment_method=4111...", "cc:")
_CARD_WORDS: Final = re.compile(
    r"card|credit|debit|visa|master\s*card|amex|american\s+express|discover|cvv|cvc|کارت"
    r"|\bexp(?:iry|ires|iration)?\b|\bpan\b|\bcc\b|\bmc\b|payment",
    re.IGNORECASE,
)
_CARD_INDUSTRIES: Final = frozenset("23456")
# How far from a number its kind's words are looked for: "کد ملی من ... است", "my card
# number is ...", "... (exp 04/27, CVV 941)".
_WORDS_BEFORE: Final = 40
_WORDS_AFTER: Final = 24
# It ends where its ASCII letters and digits do (as an e-mail's domain does): an Iranian IBAN
# (Sheba, `IR` and 24 digits) directly followed by Persian text (`IR...341است`) had no word
# boundary after it and was missed.
_IBAN: Final = re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")


_MIN_DIGITS: Final = 8  # the fewest digits of any phone, card, IBAN, SSN or national code


@dataclass(frozen=True, slots=True)
class PiiMatch:
    """One piece of personal data: its kind and its span in the (digit-normalised) text."""

    kind: PiiKind
    start: int
    end: int


def ascii_digits(text: str) -> str:
    """`text` with Persian and Arabic-Indic digits replaced by ASCII ones (same length)."""
    if text.isascii() or not any(d in text for d in _EASTERN_DIGITS):
        return text
    return _EASTERN_RUN.sub(lambda m: m.group().translate(_TO_ASCII), text)


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdecimal())


def luhn_valid(number: str) -> bool:
    """True when the digit string passes the Luhn (mod 10) check."""
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = int(ch)  # any script's decimal digit
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """True when the IBAN (spaces allowed) passes the ISO 13616 mod-97 check."""
    compact = iban.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34 or not compact.isalnum() or not compact.isascii():
        return False
    moved = compact[4:] + compact[:4]
    numeric = "".join(str(int(ch, 36)) for ch in moved)
    return int(numeric) % 97 == 1


def iran_national_code_valid(code: str) -> bool:
    """True for a 10-digit Iranian national code (کد ملی) whose check digit is right."""
    if len(code) != 10 or not code.isdigit() or len(set(code)) == 1:
        return False
    s = sum(int(code[i]) * (10 - i) for i in range(9)) % 11
    check = int(code[9])
    return check == s if s < 2 else check == 11 - s


def ssn_valid(area: str, group: str, serial: str) -> bool:
    """A US SSN shape with no all-zero field and no 666 area (9xx kept: test data uses it)."""
    return area not in ("000", "666") and group != "00" and serial != "0000"


def _card(run: str) -> bool:
    digits = _digits(run)
    return 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn_valid(digits)


def looks_like_a_card(number: str, nearby: str) -> bool:
    """Whether a number that passes the card checks is written or named as a card: grouped as
    one is printed, or starting as a payment card does with a word for a card `nearby`."""
    if _GROUPED_CARD.fullmatch(number) is not None:
        return True
    return number[0] in _CARD_INDUSTRIES and _CARD_WORDS.search(nearby) is not None


def looks_like_a_national_code(number: str, nearby: str) -> bool:
    """Whether a number that passes the national-code checksum is written (`###-######-#`) or
    named (`nearby`) as one."""
    return (
        _NATIONAL_CODE_FORM.fullmatch(number) is not None
        or _NATIONAL_CODE_WORDS.search(nearby) is not None
    )


def _in_run(run: str, offset: int, nearby: str) -> list[PiiMatch]:
    """The personal data in one digit run (`offset`: where it starts in the text; `nearby`: the
    text around it, where the words that name a number's kind are looked for)."""
    found: list[PiiMatch] = []
    for m in _SSN.finditer(run):
        if ssn_valid(m.group(1), m.group(2), m.group(3)):
            found.append(PiiMatch("ssn", offset + m.start(), offset + m.end()))
    for m in _CARD.finditer(run):
        if _card(m.group()) and looks_like_a_card(m.group(), nearby):
            found.append(PiiMatch("card", offset + m.start(), offset + m.end()))
    for m in _IR_NATIONAL.finditer(run):
        if iran_national_code_valid(_digits(m.group())) and looks_like_a_national_code(
            m.group(), nearby
        ):
            found.append(PiiMatch("national_id", offset + m.start(), offset + m.end()))
    for pattern in (_NANP, _INTL, _IR_MOBILE, _IR_LANDLINE):
        for m in pattern.finditer(run):
            if 8 <= len(_digits(m.group())) <= 15:
                found.append(PiiMatch("phone", offset + m.start(), offset + m.end()))
    return found


def _emails(text: str) -> list[PiiMatch]:
    found: list[PiiMatch] = []
    at = text.find("@")
    while at != -1:
        lo = max(0, at - 65)
        m = _EMAIL.search(text, lo, at + 256)
        if m is not None and m.start() <= at < m.end():
            found.append(PiiMatch("email", m.start(), m.end()))
        at = text.find("@", at + 1)
    return found


def _is_ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _ibans_near(text: str, start: int, end: int) -> list[PiiMatch]:
    """IBANs overlapping a digit run: their country code and check digits precede the run by
    at most 34 characters, so a short window is searched instead of the whole text. An IBAN
    is bounded by what is not an ASCII letter or digit: Persian text may touch it."""
    lo = max(0, start - 36)
    return [
        PiiMatch("iban", m.start(), m.end())
        for m in _IBAN.finditer(text, lo, min(len(text), end + 36))
        if m.end() > start
        and not (m.start() > 0 and _is_ascii_alnum(text[m.start() - 1]))
        and iban_valid(m.group())
    ]


def _digit_count(text: str) -> int:
    if text.isascii():  # the bytes that `translate` deletes, one C pass
        raw = text.encode("ascii")
        return len(raw) - len(raw.translate(None, b"0123456789"))
    return sum(map(text.count, "0123456789"))


def find_pii(text: str, scanned: TextScan | None = None) -> tuple[PiiMatch, ...]:
    """Every piece of personal data in `text`, in order of position.

    Regex scans of a long text are slow in Python, so the digit patterns run only when the
    text holds enough digits for any of them, and on a long text only where its digits cluster
    (`scan.digit_clusters`, one vectorised pass). `scanned` is `scan(text)` when the caller
    already has it.
    """
    if scanned is None and len(text) < SCAN_MIN_CHARS:
        return _find_pii_small(text)
    scanned = scanned if scanned is not None else scan(text)
    digits = digit_clusters(scanned)
    runs = digits.ascii_and_eastern >= _MIN_DIGITS and bool(digits.clusters)
    email = "@" in text
    # Persian and Arabic-Indic digits made ASCII only when something will read them
    norm = eastern_to_ascii(scanned) if digits.eastern and (runs or email) else text
    found = _emails(norm) if email else []
    if runs:
        # A digit run's digits all lie in one cluster, and the scan of the whole text reaches
        # each cluster's first digit with no run open, so scanning the clusters finds the same
        # runs as scanning everything.
        for first, last in digits.clusters:
            _runs(norm, _DIGIT_RUN.finditer(norm, first, last + 1), found)
    return tuple(sorted(set(found), key=lambda p: (p.start, p.end, p.kind)))


def _find_pii_small(text: str) -> tuple[PiiMatch, ...]:
    """`find_pii` with plain `str` scans (cheaper than numpy below `SCAN_MIN_CHARS`)."""
    norm = ascii_digits(text)
    found = _emails(norm) if "@" in norm else []
    if _digit_count(norm) >= _MIN_DIGITS:
        _runs(norm, _DIGIT_RUN.finditer(norm), found)
    return tuple(sorted(set(found), key=lambda p: (p.start, p.end, p.kind)))


def _runs(norm: str, runs: Iterator[re.Match[str]], found: list[PiiMatch]) -> None:
    for run in runs:
        start = (
            run.start() - 1 if run.start() > 0 and norm[run.start() - 1] in "+(" else run.start()
        )
        nearby = norm[max(0, start - _WORDS_BEFORE) : run.end() + _WORDS_AFTER]
        found.extend(_in_run(norm[start : run.end()], start, nearby))
        found.extend(_ibans_near(norm, run.start(), run.end()))


def pii_kinds(text: str, scanned: TextScan | None = None) -> frozenset[PiiKind]:
    """The kinds of personal data found in `text`."""
    return frozenset(match.kind for match in find_pii(text, scanned))
