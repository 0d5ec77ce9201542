"""The PII detectors on tricky cases: checksums, separators, Persian digits, near misses."""

from __future__ import annotations

import pytest

from router.classify.pii import (
    ascii_digits,
    find_pii,
    iban_valid,
    iran_national_code_valid,
    luhn_valid,
    pii_kinds,
)


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("Use my card 4111 1111 1111 1111 (exp 04/27).", {"card"}),
        ("amex 3782 822463 10005 please", {"card"}),
        ("card 5555-5555-5555-4444", {"card"}),
        ("mail me at jane.doe+tag@example.co.uk today", {"email"}),
        ("You can reach me at (555) 555-0139.", {"phone"}),
        ("call +44 20 7946 0958 now", {"phone"}),
        ("شماره من ۰۹۱۲۳۴۵۶۷۸۹ است", {"phone"}),
        ("my number is +98 912 345 6789", {"phone"}),
        ("my SSN is 968-24-6621", {"ssn"}),
        ("IBAN GB82 WEST 1234 5698 7654 32, name Elena", {"iban"}),
        ("کد ملی من ۰۰۸۴۵۷۵۹۴۸ است", {"national_id"}),
        # Iranian landlines and national codes as people write them; only `021-88776655` and
        # the unbroken code were found before the multilingual audit of 2026-12-07
        ("تلفن دفتر 021-88776655 است", {"phone"}),
        ("تلفن دفتر 02188776655 است", {"phone"}),
        ("office 021 88776655", {"phone"}),
        ("office (021) 88776655", {"phone"}),
        ("تلفن دفتر ۰۲۱ ۸۸۷۷ ۶۶۵۵ است", {"phone"}),
        ("کد ملی من 008 457594 8 است", {"national_id"}),
        ("کد ملی من ۰۰۸-۴۵۷۵۹۴-۸ است", {"national_id"}),
    ],
)
def test_detects_each_kind_of_personal_data(text: str, kinds: set[str]) -> None:
    """Each kind of personal data is found with the separators people write."""
    assert pii_kinds(text) == kinds


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # fails Luhn
        "order number 1234 5678 9012 3456",  # fails Luhn
        "what is 1 million twelve hundred divided by 400000",
        "the years 1990-2000 and 2001-2010",
        "IBAN GB82 WEST 1234 5698 7654 33",  # fails mod-97
        "code 0084575947",  # national code with a wrong check digit
        "SSN 000-12-3456 is not a valid number",
        "1111111111 is all ones",
        "version 3.10.12 of python, port 8080",
    ],
)
def test_ignores_numbers_that_only_look_like_personal_data(text: str) -> None:
    """Numbers failing their checksum or shape are not reported."""
    assert find_pii(text) == ()


def test_luhn_accepts_test_cards_and_rejects_one_digit_changes() -> None:
    """The Luhn check passes public test cards and fails when one digit changes."""
    assert luhn_valid("4111111111111111")
    assert luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111121")


def test_iban_check_is_case_and_space_insensitive() -> None:
    """IBAN validation ignores spaces and case and rejects bad lengths."""
    assert iban_valid("gb82 west 1234 5698 7654 32")
    assert iban_valid("DE89370400440532013000")
    assert not iban_valid("GB82")


def test_iran_national_code_checksum() -> None:
    """Iranian national codes are accepted only with the right check digit."""
    assert iran_national_code_valid("0084575948")
    assert not iran_national_code_valid("0084575949")
    assert not iran_national_code_valid("0000000000")


def test_persian_and_arabic_indic_digits_become_ascii_in_place() -> None:
    """Eastern digits map to ASCII without changing the text's length."""
    text = "شماره ۰۹۱۲ و ٣٤٥"
    assert ascii_digits(text) == "شماره 0912 و 345"
    assert len(ascii_digits(text)) == len(text)


def test_matches_report_spans_not_values() -> None:
    """A match gives the kind and the span of the personal data in the text."""
    text = "write to bob@example.org please"
    (match,) = find_pii(text)
    assert (match.kind, text[match.start : match.end]) == ("email", "bob@example.org")


def test_long_text_without_at_sign_or_digits_has_no_matches() -> None:
    """A long prose text without personal data yields nothing."""
    assert find_pii("lorem ipsum dolor sit amet " * 2000) == ()


# Numbers that pass a checksum by chance (about 1 in 11 ten-digit numbers passes the national
# code's, 1 in 10 numbers of 13-19 digits the Luhn check): each was personal data, and so a
# `high` request, before the classifier audit of 2026-12-07.
CHANCE_NATIONAL_CODE = "1700000004"
CHANCE_LUHN_13 = "1700000000004"
CHANCE_LUHN_16 = "4532015112830366"


def test_the_chance_numbers_pass_their_checksums() -> None:
    assert iran_national_code_valid(CHANCE_NATIONAL_CODE)
    assert iran_national_code_valid("1008000000")
    assert luhn_valid(CHANCE_LUHN_13) and luhn_valid(CHANCE_LUHN_16)


@pytest.mark.parametrize(
    "text",
    [
        f"Why did the job fail? log: ts={CHANCE_NATIONAL_CODE} level=error msg=timeout",
        f"Fix this test: assert user.id == {CHANCE_NATIONAL_CODE}",
        f"{CHANCE_NATIONAL_CODE} INFO worker-3 heartbeat ok",
        f"Why did the job fail? log: ts={CHANCE_LUHN_13} level=error",
        f"trace_id={CHANCE_LUHN_16} span=7 status=500",
        "قیمت این خودرو ۱۰۰۸۰۰۰۰۰۰ ریال است. آیا ارزان است؟",  # a price in rials
        f"card swiped at {CHANCE_LUHN_13} (ms)",  # a card word, but no card starts with 1
    ],
)
def test_numbers_without_their_kind_s_shape_or_words_are_not_personal_data(text: str) -> None:
    assert pii_kinds(text) == frozenset()


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("کد ملی من ۰۰۸۴۵۷۵۹۴۸ است", "national_id"),  # named
        ("کدملی:۰۰۸۴۵۷۵۹۴۸", "national_id"),
        ("شماره ملی ۰۰۸۴۵۷۵۹۴۸ را ثبت کن", "national_id"),
        ("my national ID is 0084575948", "national_id"),
        ("۰۰۸-۴۵۷۵۹۴-۸", "national_id"),  # written as one
        (f"my card {CHANCE_LUHN_16}, exp 04/27", "card"),  # an issuer's digits and a card word
        ("شماره کارت ۶۰۳۷۹۹۱۱۹۹۵۴۹۰۰۱", "card"),  # a Bank Melli card, named
        ("4532 0151 1283 0366", "card"),  # grouped as a card is printed
        ("3782 822463 10005", "card"),  # Amex's grouping
        # the re-audit of 2026-12-07: payment forms' words, and a national code spaced as printed
        ("4111111111111111 exp 12/26", "card"),
        ("PAN: 4111111111111111", "card"),
        ("cc: 4111111111111111", "card"),
        ("payment_method=4111111111111111 status=declined", "card"),
        ("code meli: 0084575948", "national_id"),
        ("melli code: 0084575948", "national_id"),
        ("008 457594 8", "national_id"),
    ],
)
def test_numbers_written_or_named_as_their_kind_are_found(text: str, kind: str) -> None:
    assert pii_kinds(text) == {kind}


SHEBA = "IR270170000000100324200001"  # an Iranian IBAN: IR, check digits, 22 digits


@pytest.mark.parametrize(
    "text",
    [
        f"شماره شبا {SHEBA} است",
        f"شبا: {SHEBA}است",  # Persian text right after it (missed: no word boundary there)
        f"شماره شبا{SHEBA} را ثبت کن",  # and right before it
        f"{SHEBA}.",
    ],
)
def test_an_iban_touching_persian_text_is_found(text: str) -> None:
    assert iban_valid(SHEBA)
    assert pii_kinds(text) == {"iban"}


@pytest.mark.parametrize("text", [f"x{SHEBA}", f"{SHEBA}x", f"{SHEBA}7"])
def test_an_iban_run_into_ascii_letters_or_digits_is_not_one(text: str) -> None:
    assert pii_kinds(text) == frozenset()
