"""Suite files: validation with every problem named, the shipped suites, the expect marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.run.suite import SuiteError, item_messages, load_suite

SUITES = Path(__file__).resolve().parents[2] / "evals" / "suites"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_shipped_suites_load_with_their_tasks_and_items() -> None:
    """Every shipped suite validates; each real suite has a simulator twin with the same items."""
    found = {p.name: load_suite(p) for p in sorted(SUITES.glob("*.yaml"))}
    assert {s.task for s in found.values()} == {"math", "reasoning_analysis", "extraction"}
    for name, suite in found.items():
        if name.endswith("-sim.yaml"):
            twin = found[name.replace("-sim.yaml", ".yaml")]
            assert suite.expect_marker and not twin.expect_marker
            assert [i.id for i in suite.items] == [i.id for i in twin.items]
            assert len(suite.items) >= 50


def test_simulator_suites_append_the_expect_marker_to_the_last_user_message() -> None:
    """`expect_marker` adds <<expect:VALUE>> (simulated_answer, else expected) to the prompt."""
    gsm = load_suite(SUITES / "gsm8k-50-sim.yaml")
    assert item_messages(gsm, gsm.items[0])[-1]["content"].endswith("<<expect:18>>")
    bio = load_suite(SUITES / "wikibio-extraction-50-sim.yaml")
    item = bio.items[0]
    assert item.simulated_answer is not None
    assert item_messages(bio, item)[-1]["content"].endswith(f"<<expect:{item.simulated_answer}>>")
    real = load_suite(SUITES / "gsm8k-50.yaml")
    assert "<<expect:" not in item_messages(real, real.items[0])[-1]["content"]


def test_an_invalid_suite_names_each_problem(tmp_path: Path) -> None:
    """Unknown task, unknown grader type and an item without input are all reported."""
    path = _write(tmp_path, """
name: bad
version: "1"
task: astrology
grader: {type: telepathy}
items: [{id: a}]
""")
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    message = str(err.value)
    assert "task" in message and "grader" in message and "items.0" in message


def test_a_judge_grader_without_judge_settings_is_refused(tmp_path: Path) -> None:
    """A suite that grades by judge must say how the judge is asked."""
    path = _write(tmp_path, """
name: j
version: "1"
task: chat
grader: {type: judge, rubric: "Is it polite?"}
items: [{id: a, prompt: hi}]
""")
    with pytest.raises(SuiteError, match="judge"):
        load_suite(path)


def test_duplicate_item_ids_and_empty_suites_are_refused(tmp_path: Path) -> None:
    """Item ids are unique; a suite has at least one item."""
    base = 'name: d\nversion: "1"\ntask: chat\ngrader: {type: exact}\n'
    with pytest.raises(SuiteError, match="duplicate"):
        load_suite(_write(tmp_path, base + "items: [{id: a, prompt: x}, {id: a, prompt: y}]\n"))
    with pytest.raises(SuiteError, match="no items"):
        load_suite(_write(tmp_path, base + "items: []\n"))


def _plan(*suites: Path) -> object:
    """`eval run`'s input checks on the simulator config (no call is made)."""
    import argparse

    from evals.run.cli import build_plan

    args = argparse.Namespace(
        config=Path(__file__).resolve().parents[2] / "policies" / "defaults" / "simulator.yaml",
        suite=list(suites), models="fast", concurrency=1, timeout=None, judge_model=None)
    return build_plan(args, {"SLOROUTER_SIM_BASE": "http://127.0.0.1:9", "SLOROUTER_SIM_KEY": "x"})


def test_a_suite_given_twice_is_refused() -> None:
    """Three times the same 50 items was n=150 with a narrower interval; now an input error."""
    from evals.run.cli import InputError

    gsm = SUITES / "gsm8k-50-sim.yaml"
    with pytest.raises(InputError, match=r"suite given more than once: gsm8k-50-sim \(3 times\)"):
        _plan(gsm, gsm, gsm)
    assert len(_plan(gsm, SUITES / "mmlu-57-sim.yaml").suites) == 2  # type: ignore[attr-defined]


def test_items_shared_by_two_suites_are_refused(tmp_path: Path) -> None:
    """A suite and its simulator twin share every id and prompt; two suites that share one
    prompt under different ids are refused too, naming both items."""
    from evals.run.cli import InputError

    with pytest.raises(InputError) as caught:
        _plan(SUITES / "gsm8k-50.yaml", SUITES / "gsm8k-50-sim.yaml")
    assert "item ids repeated across suites (50): gsm8k/0 in gsm8k-50 and gsm8k-50-sim" \
        in str(caught.value)
    base = 'version: "1"\ntask: math\ngrader: {type: exact}\n'
    first = tmp_path / "a.yaml"
    first.write_text("name: a\n" + base + "items: [{id: a1, prompt: 'What is 2+2?'}]\n")
    second = tmp_path / "b.yaml"
    second.write_text("name: b\n" + base + "items: [{id: b1, prompt: ' What is 2+2? '}, "
                      "{id: b2, prompt: 'What is 3+3?'}]\n")
    with pytest.raises(InputError, match=r"prompts repeated \(1\): b item b1 asks what a item "
                                         r"a1 asks$"):
        _plan(first, second)


@pytest.mark.parametrize("grader", ["{type: numeric, abs_tol: true}",
                                    "{type: exact, case_sensitive: 1}",
                                    "{type: regex, ignore_case: \"yes\"}"])
def test_booleans_and_numbers_are_not_read_as_one_another(tmp_path: Path, grader: str) -> None:
    """`abs_tol: true` is not a tolerance of 1 (every answer within 1 would pass), nor is
    `case_sensitive: 1` true: the suite is refused naming the field."""
    path = _write(tmp_path, f"""
name: typed
version: "1"
task: math
grader: {grader}
items: [{{id: a, prompt: "2+2?", expected: "4"}}]
""")
    field = grader.split(", ")[1].split(":")[0]
    with pytest.raises(SuiteError, match=f"grader.*{field}"):
        load_suite(path)
