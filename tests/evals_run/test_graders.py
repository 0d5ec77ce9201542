"""Pure graders and the judge's reply parsing."""

from __future__ import annotations

import pytest

from evals.run.graders import choice_letter, extract_json, grade, parse_number
from evals.run.judge import judge_messages, read_verdict, simulated_verdict
from evals.run.suite import (
    ChoiceGrader,
    ExactGrader,
    Item,
    JsonSchemaGrader,
    JudgeGrader,
    JudgeSettings,
    NumericGrader,
    RegexGrader,
)


def test_numeric_takes_the_last_number_with_commas_and_dollars() -> None:
    """The last number counts; `$1,234.50` reads as 1234.5."""
    assert parse_number("16 - 3 - 4 = 9 eggs, so $18") == 18.0
    assert parse_number("total: $1,234.50") == 1234.5
    assert parse_number("no digits here") is None
    spec = NumericGrader()
    assert grade(spec, "The answer is 70,000", "70000").score == 1.0
    assert grade(spec, "I think 71000", "70000").score == 0.0
    assert grade(spec, "unknown", "5").note == "no number"


def test_numeric_tolerance_is_absolute_and_relative() -> None:
    """abs_tol and rel_tol widen the match as math.isclose does."""
    assert grade(NumericGrader(abs_tol=0.5), "10.4", "10").score == 1.0
    assert grade(NumericGrader(rel_tol=0.01), "101", "100").score == 1.0
    assert grade(NumericGrader(), "10.4", "10").score == 0.0


def test_choice_prefers_an_answer_marker_then_the_first_standalone_letter() -> None:
    """"Answer: C" wins over an earlier article "A"; otherwise the first standalone letter."""
    assert choice_letter("A good question. The answer is (C).", "ABCD") == "C"
    assert choice_letter("B. make glucose", "ABCD") == "B"
    assert choice_letter("none fits", "ABCD") is None
    assert grade(ChoiceGrader(letters="ABCD"), "D", "d").score == 1.0
    assert grade(ChoiceGrader(letters="ABCD"), "Answer: A", "B").note == "chose A"


def test_exact_and_regex_graders() -> None:
    """Exact compares stripped text (case-folded unless asked); regex searches or full-matches."""
    assert grade(ExactGrader(), "  Paris ", "paris").score == 1.0
    assert grade(ExactGrader(case_sensitive=True), "paris", "Paris").score == 0.0
    assert grade(RegexGrader(), "born in 1969", r"19\d\d").score == 1.0
    assert grade(RegexGrader(pattern=r"\d+", full_match=True), "12 apples", None).score == 0.0


def test_json_schema_grader_validates_and_respects_the_extract_mode() -> None:
    """Valid JSON passes; a fenced block passes in `fenced`; prose needs `embedded`."""
    schema = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    fenced = JsonSchemaGrader.model_validate({"schema": schema})
    assert grade(fenced, '{"name": "x"}', None).score == 1.0
    assert grade(fenced, 'Here:\n```json\n{"name": "x"}\n```', None).score == 1.0
    assert grade(fenced, '{"name": 3}', None).note.startswith("schema:")
    assert grade(fenced, 'not {"name": "x"}', None).score == 0.0
    embedded = JsonSchemaGrader.model_validate({"schema": schema, "extract": "embedded"})
    assert grade(embedded, 'Sure: {"name": "x"} done', None).score == 1.0
    with pytest.raises(ValueError):
        extract_json("no json", "embedded")


def test_an_invalid_json_schema_is_rejected_when_the_suite_loads() -> None:
    """A schema that is not itself valid fails validation of the grader."""
    with pytest.raises(ValueError, match="invalid JSON schema"):
        JsonSchemaGrader.model_validate({"schema": {"type": "no-such-type"}})


def test_judge_pass_fail_replies_are_read_strictly() -> None:
    """PASS/FAIL at the start, on a verdict line or as the last line; anything else is None."""
    settings = JudgeSettings()
    assert read_verdict(settings, "PASS") is not None
    assert read_verdict(settings, "pass.").score == 1.0  # type: ignore[union-attr]
    assert read_verdict(settings, "The answer is wrong.\nVerdict: FAIL").score == 0.0  # type: ignore[union-attr]
    assert read_verdict(settings, "Reasoning...\n**FAIL**").score == 0.0  # type: ignore[union-attr]
    assert read_verdict(settings, "not PASS") is None
    assert read_verdict(settings, "maybe") is None


def test_judge_score_replies_pass_at_the_threshold_and_reject_out_of_range() -> None:
    """The last number is the score; >= pass_score passes; outside [0, max] is unparseable."""
    settings = JudgeSettings(verdict="score", max_score=10, pass_score=7)
    assert read_verdict(settings, "Score: 7").score == 1.0  # type: ignore[union-attr]
    assert read_verdict(settings, "6.5/10 overall... final 6.5").score == 0.0  # type: ignore[union-attr]
    assert read_verdict(settings, "12") is None


def test_judge_prompt_carries_rubric_reference_answer_and_simulated_verdict() -> None:
    """The judge sees rubric, question, reference, candidate; simulator suites add the marker."""
    item = Item(id="q", prompt="Capital of France?", expected="Paris")
    spec = JudgeGrader(rubric="Judge factual correctness.")
    settings = JudgeSettings()
    text = judge_messages(spec, settings, item, "Capital of France?", "Paris", simulate=True)
    content = text[0]["content"]
    assert "Judge factual correctness." in content and "Reference answer:\nParis" in content
    assert content.endswith("<<expect:PASS>>")
    assert simulated_verdict(settings, item, "Lyon") == "FAIL"
    plain = judge_messages(spec, settings, item, "Capital of France?", "Lyon", simulate=False)
    assert "<<expect:" not in plain[0]["content"]
