"""Pure graders: (grader spec, answer text, expected value) -> `Grade`.

`exact`, `choice` (the answer's letter: "Answer: B", "(B)", else the first standalone letter),
`numeric` (the last number in the answer, commas and `$` ignored, within tolerance), `regex`
(search, or full match), `json_schema` (the answer, or its fenced ```json block, or its outermost
braces, as the grader's `extract` allows, validated with the `jsonschema` package, which the
lock file already installs). The LLM judge needs a call, so it
lives in `judge` and the runner; `grade` refuses it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from evals.run.suite import (
    ChoiceGrader,
    ExactGrader,
    GraderSpec,
    JsonSchemaGrader,
    JudgeGrader,
    NumericGrader,
    RegexGrader,
    regex_problem,
)


@dataclass(frozen=True, slots=True)
class Grade:
    """A score in [0, 1] (1 = pass) and a short note for the per-item details."""

    score: float
    note: str = ""


PASS = Grade(1.0)

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_ANSWER_LETTER = re.compile(r"answer\s*(?:is|:)?\s*[\(\[]?\s*([A-Za-z])\b", re.IGNORECASE)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_number(text: str) -> float | None:
    """The last number in a text (`1,234.5`, `$18`, `-3`), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", "").replace("$", ""))
    except ValueError:
        return None


def choice_letter(answer: str, letters: str) -> str | None:
    """The chosen letter: after "answer", else the first standalone allowed letter."""
    marked = _ANSWER_LETTER.search(answer)
    if marked and marked.group(1).upper() in letters:
        return marked.group(1).upper()
    standalone = re.search(rf"(?<![A-Za-z])([{re.escape(letters)}])(?![A-Za-z])", answer)
    return standalone.group(1) if standalone else None


def extract_json(answer: str, mode: str = "fenced") -> Any:
    """The JSON value in an answer (`whole`, `fenced`, `embedded`); ValueError when none."""
    candidates = [answer.strip()]
    if mode in ("fenced", "embedded"):
        candidates += [m.group(1) for m in _FENCED.finditer(answer)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = answer.find(opener), answer.rfind(closer)
        if mode == "embedded" and 0 <= start < end:
            candidates.append(answer[start:end + 1])
    for text in candidates:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
    raise ValueError("no JSON value in the answer")


def _exact(spec: ExactGrader, answer: str, expected: str) -> Grade:
    a, e = answer.strip(), expected.strip()
    same = a == e if spec.case_sensitive else a.casefold() == e.casefold()
    return PASS if same else Grade(0.0, "differs")


def _choice(spec: ChoiceGrader, answer: str, expected: str) -> Grade:
    letter = choice_letter(answer, spec.letters)
    if letter is None:
        return Grade(0.0, "no choice letter")
    return PASS if letter == expected.strip().upper() else Grade(0.0, f"chose {letter}")


def _numeric(spec: NumericGrader, answer: str, expected: str) -> Grade:
    want, got = parse_number(expected), parse_number(answer)
    if want is None:
        raise ValueError(f"expected value {expected!r} is not a number")
    if got is None:
        return Grade(0.0, "no number")
    close = math.isclose(got, want, rel_tol=spec.rel_tol, abs_tol=spec.abs_tol)
    return PASS if close else Grade(0.0, f"got {got:g}")


def _regex(spec: RegexGrader, answer: str, expected: str) -> Grade:
    pattern = spec.pattern if spec.pattern is not None else expected
    flags = re.IGNORECASE if spec.ignore_case else 0
    text = answer.strip()
    found = re.fullmatch(pattern, text, flags) if spec.full_match else re.search(pattern, text,
                                                                                 flags)
    return PASS if found else Grade(0.0, "no match")


def _json_schema(spec: JsonSchemaGrader, answer: str) -> Grade:
    try:
        value = extract_json(answer, spec.extract)
    except ValueError as exc:
        return Grade(0.0, str(exc))
    errors = sorted(Draft202012Validator(spec.json_schema).iter_errors(value), key=str)
    return PASS if not errors else Grade(0.0, f"schema: {errors[0].message[:120]}")


def item_problem(spec: GraderSpec, expected: str | None) -> str | None:
    """Why `grade(spec, answer, expected)` would raise for any answer (None: it grades)."""
    if isinstance(spec, JsonSchemaGrader | JudgeGrader):
        return None  # the schema is checked when the suite loads; a judge needs no `expected`
    if isinstance(spec, RegexGrader) and spec.pattern is not None:
        return None  # the pattern is checked when the suite loads
    if expected is None:
        return f"no `expected`, which the {spec.type} grader needs"
    if isinstance(spec, NumericGrader) and parse_number(expected) is None:
        return f"`expected` {expected!r} is not a number (numeric grader)"
    if isinstance(spec, RegexGrader):
        return regex_problem(expected)
    if isinstance(spec, ChoiceGrader) and expected.strip().upper() not in list(spec.letters):
        return f"`expected` {expected!r} is not one of the letters {spec.letters}"
    return None


def grade(spec: GraderSpec, answer: str, expected: str | None) -> Grade:
    """Grade one answer; `expected` is required by every grader but `json_schema`."""
    if isinstance(spec, JsonSchemaGrader):
        return _json_schema(spec, answer)
    if isinstance(spec, RegexGrader) and spec.pattern is not None:
        return _regex(spec, answer, "")
    if expected is None:
        raise ValueError(f"the {spec.type} grader needs an expected value")
    if isinstance(spec, ExactGrader):
        return _exact(spec, answer, expected)
    if isinstance(spec, ChoiceGrader):
        return _choice(spec, answer, expected)
    if isinstance(spec, NumericGrader):
        return _numeric(spec, answer, expected)
    if isinstance(spec, RegexGrader):
        return _regex(spec, answer, expected)
    raise ValueError("the judge grader needs a judge call: use evals.run.judge")

