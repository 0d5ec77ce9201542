"""Generates `router/token_weights.bin`, the token estimate's weight of each non-ASCII character.

    python -m bench.token_weights [--out router/token_weights.bin] [--margin 1.1] [--repeats 32]

`router/token_estimate.py` counts a text's ASCII characters by class and every other character
by this table: one byte for each of the 65,536 UTF-16 code units, in twentieths of a token
(zlib-compressed). A character of the Basic Multilingual Plane has its own weight; one beyond
it (two code units) counts its high surrogate's weight, one for each block of 1,024 code points,
and its low surrogate's 0. ASCII code units are 0 (the estimate's ASCII rates count them).

A character's weight is what cl100k_base takes for it in running text, times `--margin`: each
assigned character is written `--repeats` times (each time in a new, seeded random order) into
synthetic text of its kind, and each token of that text's encoding is shared out over the bytes
it spans; a character's share of a text's tokens, scaled so that the text's non-ASCII
characters share out what the text costs over its ASCII characters alone (the word a combining
mark splits, the space a letter no longer merges with), is averaged over its occurrences. The
kinds of text, by the first word of a character's Unicode name (its script, mostly):

- letters and marks of a script (ARABIC, DEVANAGARI, GEORGIAN, CJK, HANGUL, ...): words of one
  to seven random letters, each followed by one of the script's marks as often as the script
  has marks for its letters (at most one letter in two), the script's own signs (a danda, an
  Arabic comma) ending three words in ten; words apart by spaces in seven texts of ten, run
  together in the rest (as Chinese, Japanese and Thai write);
- Latin letters beyond ASCII (é, ß, ő, ạ): one or two in each English word;
- combining marks of no script's letters (COMBINING ACUTE ACCENT, a variation selector):
  after one letter in three of English words (decomposed accents, zalgo);
- digits (Persian, Devanagari, full-width): runs of one to six apart by spaces;
- box drawing: tables and trees, rules of one horizontal line's runs between junctions and
  rows of words between vertical lines (a run of `─` is four a token);
- other punctuation, symbols, spaces and format characters (curly quotes, arrows, emoji, a
  zero-width joiner): among English words, alone or against a word, in runs of two or three,
  or one repeated two to eight times (rules, star ratings).

Random text of a script has few of the multi-character tokens real text of a widely written
language has, so the table errs high there (Russian, Persian), as the estimate should; a script
cl100k_base has no such tokens for is priced about at cost (0.99-1.07 of it at a margin of 1.0,
`tests/unit/test_token_estimate.py`'s samples), and the margin covers the spread. Unassigned
and private-use code points count their cost alone, times the margin; an astral block's weight
is the mean over its assigned characters (or the cost alone of every 64th of its code points
where none is assigned).

cl100k_base is read offline from the file litellm ships (`tests/support/tokenizer.py`). Seeded:
the same tokenizer file and Python (its `unicodedata`: Unicode 14 on 3.11) give the same table,
in about 10 s. `python -m bench.estimate_calibration` and `tests/unit/test_token_estimate.py`
hold the estimate to cl100k_base by kind of text and by script.
"""

from __future__ import annotations

import argparse
import random
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from router.cli_types import seed_number
from router.token_estimate import UNITS_PER_TOKEN, WEIGHTS_FILE
from tests.support.tokenizer import cl100k_encoding

ASTRAL_BLOCK = 1024  # code points per high surrogate
# Frequent English words, the ASCII text that Latin letters, marks and symbols are set in.
ENGLISH = str.split(
    "the of and to in is you that it he was for on are as with his they at be this from have "
    "or by one had not but what all were when we there can an your which their said if do will "
    "each about how up out them then she many some so these would other into has more her two "
    "like him see time could no make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know get "
    "through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place "
    "well such here take why things help put years different away again off went old number "
    "great tell men say small every found still between name should home big give air line "
    "set own under read last never us left end along while might next sound below saw "
    "something thought both few those always looked show large often together asked house "
    "world going want school important until form food keep children feet land side without "
    "once life enough took sometimes four head above kind began almost live page got earth "
    "need far hand high year mother light country father let night following picture being "
    "study second eyes soon times story since white days ever paper hard near sentence better "
    "best across during today others however sure means knew try told young report summary "
    "request answer model file data error value table function service server price")


class Stream:
    """Each of `chars` `repeats` times, each time in a new random order."""

    def __init__(self, chars: list[str], repeats: int, rng: random.Random) -> None:
        self.items = [c for _ in range(repeats) for c in rng.sample(chars, len(chars))]
        self.taken = 0

    def __bool__(self) -> bool:
        return bool(self.items)

    def done(self) -> bool:
        return self.taken >= len(self.items)

    def take(self) -> str:
        char = self.items[self.taken % len(self.items)]
        self.taken += 1
        return char


def kinds() -> dict[tuple[str, str], list[str]]:
    """Assigned non-ASCII characters (surrogates, private use and unassigned apart) by the first
    word of their name and by kind: `L` letters and marks of a script with letters, `M` marks of
    none, `N` digits, `S` everything else (a script's own signs are `P` of its name)."""
    by_name: dict[str, dict[str, list[str]]] = {}
    for cp in range(0x80, 0x110000):
        char = chr(cp)
        category = unicodedata.category(char)
        if category in ("Cn", "Co", "Cs"):
            continue
        first = unicodedata.name(char, "").split(" ")[0]
        by_name.setdefault(first, {}).setdefault(category[0], []).append(char)
    out: dict[tuple[str, str], list[str]] = {}
    for first, groups in by_name.items():
        letters = groups.get("L", [])
        if letters:
            out[(first, "L")] = letters + groups.get("M", [])
            out[(first, "P")] = groups.get("P", []) + groups.get("S", [])
        else:
            out[(first, "M")] = groups.get("M", [])
            out[(first, "S")] = groups.get("P", []) + groups.get("S", [])
        digits = [c for c in groups.get("N", []) if unicodedata.category(c) == "Nd"]
        out[(first, "N")] = digits
        out[(first, "S")] = (out.get((first, "S"), []) + groups.get("Z", []) + groups.get("C", [])
                             + [c for c in groups.get("N", []) if c not in digits])
    return {key: chars for key, chars in out.items() if chars}


def script_texts(letters: list[str], signs: list[str], repeats: int,
                 rng: random.Random) -> Iterator[str]:
    marks = [c for c in letters if unicodedata.category(c)[0] == "M"]
    bases = Stream([c for c in letters if unicodedata.category(c)[0] != "M"], repeats, rng)
    mark_stream = Stream(marks, repeats, rng)
    mark_rate = min(0.5, len(marks) / max(1, len(letters) - len(marks)))
    sign_stream = Stream(signs, repeats, rng)
    while not (bases.done() and mark_stream.done() and (not sign_stream or sign_stream.done())):
        words = []
        for _ in range(20):
            word = []
            for _ in range(rng.randint(1, 7)):
                word.append(bases.take())
                if mark_stream and rng.random() < mark_rate:
                    word.append(mark_stream.take())
            if sign_stream and rng.random() < 0.3:
                word.append(sign_stream.take())
            words.append("".join(word))
        yield (" " if rng.random() < 0.7 else "").join(words)


def latin_texts(letters: list[str], repeats: int, rng: random.Random) -> Iterator[str]:
    stream = Stream(letters, repeats, rng)
    while not stream.done():
        words = []
        for _ in range(20):
            word = list(rng.choice(ENGLISH))
            for _ in range(rng.choice((1, 1, 2))):
                word.insert(rng.randrange(len(word) + 1), stream.take())
            words.append("".join(word))
        yield " ".join(words)


def mark_texts(marks: list[str], repeats: int, rng: random.Random) -> Iterator[str]:
    stream = Stream(marks, repeats, rng)
    while not stream.done():
        words = []
        for _ in range(20):
            words.append("".join(c + (stream.take() if rng.random() < 0.3 else "")
                                 for c in rng.choice(ENGLISH)))
        yield " ".join(words)


def digit_texts(digits: list[str], repeats: int, rng: random.Random) -> Iterator[str]:
    stream = Stream(digits, repeats, rng)
    while not stream.done():
        yield " ".join("".join(stream.take() for _ in range(rng.randint(1, 6)))
                       for _ in range(15))


def symbol_texts(symbols: list[str], repeats: int, rng: random.Random) -> Iterator[str]:
    stream = Stream(symbols, repeats, rng)
    while not stream.done():
        parts = []
        for _ in range(15):
            shape = rng.random()
            if shape < 0.6:
                run = stream.take()
            elif shape < 0.9:
                run = "".join(stream.take() for _ in range(rng.randint(2, 3)))
            else:
                run = stream.take() * rng.randint(2, 8)
            place = rng.random()
            word = rng.choice(ENGLISH)
            parts.append(run if place < 0.5 else run + word if place < 0.75 else word + run)
            parts.append(rng.choice(ENGLISH))
        yield " ".join(parts)


def frame_texts(chars: list[str], repeats: int, rng: random.Random) -> Iterator[str]:
    """Tables and trees: rules of a horizontal line's runs between junctions, rows of cells
    between vertical lines, any box-drawing character a junction."""
    joints = Stream(chars, repeats, rng)
    lines = Stream([c for c in chars if "HORIZONTAL" in unicodedata.name(c)], repeats, rng)
    walls = Stream([c for c in chars if "VERTICAL" in unicodedata.name(c)], repeats, rng)
    while not (joints.done() and lines.done() and walls.done()):
        rows = []
        for _ in range(8):
            cells = rng.randint(1, 3)
            if rng.random() < 0.5:
                line = lines.take()
                rows.append(joints.take() + "".join(line * rng.randint(2, 8) + joints.take()
                                                    for _ in range(cells)))
            else:
                wall = walls.take()
                rows.append(wall + "".join(f" {rng.choice(ENGLISH):<8} {wall}"
                                           for _ in range(cells)))
        yield "\n".join(rows)


def corpus(repeats: int, rng: random.Random) -> Iterator[str]:
    """The synthetic texts, kind by kind."""
    groups = kinds()
    for (first, kind), chars in sorted(groups.items()):
        if kind == "L" and first == "LATIN":
            yield from latin_texts(chars, repeats, rng)
        elif kind == "L":
            yield from script_texts(chars, groups.get((first, "P"), []), repeats, rng)
        elif kind == "M":
            yield from mark_texts(chars, repeats, rng)
        elif kind == "N":
            yield from digit_texts(chars, repeats, rng)
        elif kind == "S" and first == "BOX":
            yield from frame_texts(chars, repeats, rng)
        elif kind == "S":
            yield from symbol_texts(chars, repeats, rng)


def in_context_cost(encoding: Any, repeats: int, seed: int) -> np.ndarray:
    """Each code point's mean share of the tokens of the synthetic text (0 where not written)."""
    rng = random.Random(seed)
    total = np.zeros(0x110000)
    count = np.zeros(0x110000)
    for text in corpus(repeats, rng):
        tokens = encoding.encode(text, disallowed_special=())
        lengths = np.array([len(b) for b in encoding.decode_tokens_bytes(tokens)])
        per_byte = np.repeat(1.0 / lengths, lengths)
        cps = np.frombuffer(text.encode("utf-32-le"), np.uint32).astype(np.int64)
        widths = np.select([cps < 0x80, cps < 0x800, cps < 0x10000], [1, 2, 3], 4)
        shares = np.bincount(np.repeat(np.arange(len(cps)), widths), weights=per_byte,
                             minlength=len(cps))
        others = cps >= 0x80
        ascii_rest = "".join(c for c in text if c.isascii())
        owed = max(0, len(tokens) - len(encoding.encode(ascii_rest, disallowed_special=())))
        scale = owed / shares[others].sum()
        np.add.at(total, cps[others], shares[others] * scale)
        np.add.at(count, cps[others], 1)
    return np.divide(total, count, out=np.zeros_like(total), where=count > 0)


def table(encoding: Any, margin: float, repeats: int, seed: int) -> np.ndarray:
    """The 65,536 code units' weights in twentieths of a token."""
    cost = in_context_cost(encoding, repeats, seed)

    def alone(cp: int) -> int:
        return len(encoding.encode(chr(cp), disallowed_special=()))

    def units(tokens: float) -> int:
        return min(255, int(np.ceil(round(margin * tokens * UNITS_PER_TOKEN, 6))))

    weights = np.zeros(0x10000, np.uint8)
    for cp in range(0x80, 0x10000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        weights[cp] = units(cost[cp] if cost[cp] > 0 else alone(cp))
    for block in range(1024):
        first = 0x10000 + block * ASTRAL_BLOCK
        costs = cost[first:first + ASTRAL_BLOCK]
        written = costs[costs > 0]
        mean = (written.mean() if len(written)
                else np.mean([alone(cp) for cp in range(first, first + ASTRAL_BLOCK, 64)]))
        weights[0xD800 + block] = units(float(mean))
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE)
    parser.add_argument("--margin", type=float, default=1.1)
    parser.add_argument("--repeats", type=int, default=32)
    parser.add_argument("--seed", type=seed_number, default=1)
    args = parser.parse_args()
    weights = table(cl100k_encoding(), args.margin, args.repeats, args.seed)
    args.out.write_bytes(zlib.compress(weights.tobytes(), 9))
    print(f"{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
