"""A very long prompt is measured on a worker thread and routed on the event loop: routing
reads the statistics, health, in-flight counts and experiments the loop writes (read from the
thread, a recomputation of the SLO tracker's kept sums raced the loop's counting)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from policies.eligibility import RequestFacts, Verdict
from policies.schema import TaskPolicy
from router.api.body import parse_chat, parse_json_object
from router.api.chat import OFFLOAD_PROMPT_CHARS, prepare_off_loop
from router.classify.types import Classifier, Hints, Labels, RequestView
from router.decide import Ranked, StaticRanker
from router.execution.plan import ExecutionState
from router.execution.runner import Runner
from router.pipeline import Caller, ChatPipeline, Prepared
from router.policy_cli import _load
from router.runtime_config import RuntimeConfig
from router.wiring import build_runtime

DEFAULTS = Path(__file__).resolve().parents[2] / "policies" / "defaults" / "simulator.yaml"


class ThreadOf:
    """Records the thread each call ran on."""

    def __init__(self) -> None:
        self.threads: dict[str, set[int]] = {}

    def saw(self, what: str) -> None:
        self.threads.setdefault(what, set()).add(threading.get_ident())


class RecordingRanker(StaticRanker):
    def __init__(self, seen: ThreadOf) -> None:
        self._seen = seen

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        self._seen.saw("rank")
        return super().rank(policy, facts, eligible)


class RecordingClassifier:
    def __init__(self, inner: Classifier, seen: ThreadOf) -> None:
        self._inner = inner
        self._seen = seen

    @property
    def version(self) -> str:
        return self._inner.version

    def classify(self, view: RequestView, hints: Hints) -> Labels:
        self._seen.saw("classify")
        return self._inner.classify(view, hints)


@functools.cache
def default_runtime() -> tuple[RuntimeConfig, Classifier]:
    path, config = _load(DEFAULTS)
    return build_runtime(config, {"SLOROUTER_SIM_KEY": "sim-key"}, path.resolve().parent)


def pipeline(seen: ThreadOf) -> ChatPipeline:
    runtime, classifier = default_runtime()

    def healthy(_deployment: str) -> bool:
        seen.saw("health")
        return True

    return ChatPipeline(runtime, RecordingClassifier(classifier, seen),
                        Runner({}, ExecutionState.create()), ranker=RecordingRanker(seen),
                        health=healthy)


async def prepared_on(seen: ThreadOf, chars: int) -> tuple[int, Prepared]:
    raw = parse_json_object(orjson.dumps({
        "model": "auto",
        "messages": [{"role": "user",
                      "content": "Summarize this report. " + "word " * (chars // 5)}],
    }))
    prepared = await prepare_off_loop(pipeline(seen), parse_chat(raw), raw, {},
                                      time.perf_counter() + 60, Caller())
    return threading.get_ident(), prepared


async def test_a_long_prompt_is_classified_off_the_loop_and_routed_on_it() -> None:
    seen = ThreadOf()
    loop_thread, prepared = await prepared_on(seen, OFFLOAD_PROMPT_CHARS * 2)
    assert prepared.decision.deployments
    assert seen.threads["classify"] and loop_thread not in seen.threads["classify"]
    for live_state in ("rank", "health"):
        assert seen.threads[live_state] == {loop_thread}, live_state
    phases = prepared.phases
    assert phases.classify > 0 and phases.decide > 0


async def test_a_short_prompt_is_prepared_on_the_loop() -> None:
    seen = ThreadOf()
    loop_thread, prepared = await prepared_on(seen, 1_000)
    assert prepared.decision.deployments
    assert {t for threads in seen.threads.values() for t in threads} == {loop_thread}
