"""The LLM-judge grader, pure parts: the judge's prompt and the reading of its reply.

The runner sends `judge_messages(...)` to the configured judge model and grades with
`read_verdict(...)`. `pass_fail`: the reply starts with PASS or FAIL, or has a `verdict: PASS`
line, or its last line is one of the two words. `score`: the last number of the reply, within
[0, max_score], passes at `pass_score` or above. A reply that says neither is *unparseable*:
it fails the item and is counted apart, so a broken judge is visible in the run summary.

In a simulator suite (`expect_marker`), the judge prompt ends with `<<expect:PASS>>` when the
candidate's answer equals the item's simulated answer (else `<<expect:FAIL>>`; in score mode
`max_score` / `0`): a simulated judge then agrees with exact match with its own `accuracy`,
and its wrong replies (`not PASS`) are unparseable. It models a judge's error rate, not its taste.
"""

from __future__ import annotations

import re

from evals.run.graders import Grade, parse_number
from evals.run.suite import Item, JudgeGrader, JudgeSettings

_START = re.compile(r"^\W*(PASS|FAIL)\b", re.IGNORECASE)
_LINE = re.compile(r"verdict\s*[:=]\s*\**\s*(PASS|FAIL)\b", re.IGNORECASE)


def _instruction(settings: JudgeSettings) -> str:
    if settings.verdict == "pass_fail":
        return ("Reply with one word: PASS if the candidate answer meets the rubric, "
                "otherwise FAIL.")
    return (f"Reply with a score from 0 to {settings.max_score:g} on the last line "
            "(higher is better).")


def simulated_verdict(settings: JudgeSettings, item: Item, answer: str) -> str:
    """What a simulated judge should answer: exact match against the simulated answer."""
    want = item.simulated_answer if item.simulated_answer is not None else item.expected
    right = want is not None and answer.strip() == want.strip()
    if settings.verdict == "pass_fail":
        return "PASS" if right else "FAIL"
    return f"{settings.max_score:g}" if right else "0"


def judge_messages(spec: JudgeGrader, settings: JudgeSettings, item: Item, question: str,
                   answer: str, simulate: bool) -> list[dict[str, str]]:
    """The judge's chat messages for one graded answer."""
    parts = [spec.rubric.strip(), f"Question:\n{question.strip()}"]
    if item.expected is not None:
        parts.append(f"Reference answer:\n{item.expected.strip()}")
    parts += [f"Candidate answer:\n{answer.strip()}", _instruction(settings)]
    text = "\n\n".join(parts)
    if simulate:
        text += f"\n<<expect:{simulated_verdict(settings, item, answer)}>>"
    return [{"role": "user", "content": text}]


def _pass_fail(reply: str) -> bool | None:
    text = reply.strip()
    found = _START.match(text) or _LINE.search(text)
    if found is None:
        lines = [line.strip(" *.`") for line in text.splitlines() if line.strip()]
        last = lines[-1].upper() if lines else ""
        return {"PASS": True, "FAIL": False}.get(last)
    return found.group(1).upper() == "PASS"


def read_verdict(settings: JudgeSettings, reply: str) -> Grade | None:
    """The grade a judge's reply gives, or None when the reply is unparseable."""
    if settings.verdict == "pass_fail":
        passed = _pass_fail(reply)
        if passed is None:
            return None
        return Grade(1.0, "judge: PASS") if passed else Grade(0.0, "judge: FAIL")
    score = parse_number(reply)
    if score is None or not 0 <= score <= settings.max_score:
        return None
    note = f"judge: {score:g}/{settings.max_score:g}"
    return Grade(1.0, note) if score >= settings.pass_score else Grade(0.0, note)
