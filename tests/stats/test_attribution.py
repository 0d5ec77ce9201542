"""A failed attempt is its deployment's failure only when it does not stand alone.

While a deployment serves another tenant fine, one tenant's failures (its poison prompts) are
its own: the statistics the ranking reads and the SLO tracker's deployment series leave them
out, the task's SLO (what the client got) counts them. An outage failing everyone counts after
a few of the others' failures; a deployment one tenant uses alone counts its failures as
before. The rule is the breaker's (`breaker_rules.alone`) with the ranker's error-rate test.
"""

from __future__ import annotations

import time

from router import errors
from router.execution.attempt import AttemptRecord
from router.execution.breaker_rules import Counts
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.scoring import ScoringConfig
from router.slo import SloTargets, SloTracker
from router.stats.attribution import Attribution, AttributionPolicy, over_budget
from tests.stats.sim import RecordingStore

BUDGET = 0.005  # availability 0.995
NOW = 1_000.0


def _served(attribution: Attribution, principal: str, times: int, now: float = NOW,
            deployment: str = "d") -> None:
    for _ in range(times):
        attribution.served(deployment, principal, now)


def _failed(attribution: Attribution, principal: str, times: int, now: float = NOW,
            deployment: str = "d") -> list[bool]:
    return [attribution.failed(deployment, principal, now, BUDGET) for _ in range(times)]


def test_the_failures_of_a_tenant_alone_on_a_deployment_are_the_deployment_s() -> None:
    """Nobody else served in the window: every failure counts, as before."""
    attribution = Attribution()
    _served(attribution, "a", 20)
    assert _failed(attribution, "a", 10) == [True] * 10


def _interleaved(attribution: Attribution, poisoner: str, others: list[str],
                 rounds: int, failures: int = 1) -> list[bool]:
    """Each round, the next of `others` served once, then `failures` of `poisoner`'s failed."""
    counted = []
    for i in range(rounds):
        _served(attribution, others[i % len(others)], 1)
        counted += _failed(attribution, poisoner, failures)
    return counted


def test_one_tenants_failures_while_another_is_served_fine_are_its_own() -> None:
    attribution = Attribution()
    _served(attribution, "a", 20)
    assert _interleaved(attribution, "b", ["a"], 50, failures=2) == [False] * 100
    assert _failed(attribution, "a", 1) == [True]  # b is never served: a's failure stands


def test_failures_with_no_other_answer_begun_lately_are_an_outage_beginning() -> None:
    """Another tenant's success from before an outage held every failure of the busy tenant's
    back while it stayed in the window (7-8 s in the re-audit, the busy tenant's clients
    answered 503): only another's answer begun within `recent_s` before a failure says the
    deployment serves others now."""
    attribution = Attribution()
    _served(attribution, "b", 1, now=NOW - 3.0)
    _served(attribution, "a", 20, now=NOW - 1.0)
    assert _failed(attribution, "a", 5) == [True] * 5
    quiet = Attribution()
    _served(quiet, "a", 20, now=NOW - 3.0)
    assert _failed(quiet, "c", 2) == [True, True]  # a quiet for 3 s: c's count
    _served(quiet, "a", 1, now=NOW + 0.1)
    assert _failed(quiet, "c", 5, now=NOW + 0.2) == [False] * 5  # a answered since: c's own


def test_an_answer_begun_before_an_outage_and_ended_after_it_hides_nothing() -> None:
    """A stream of b's begun before the outage and ended 0.3 s into it held a's failures back
    for the window (30 s: the re-audit): an answer counts from when it began."""
    attribution = Attribution()
    _served(attribution, "a", 20, now=NOW - 5.0)
    attribution.served("d", "b", NOW + 0.3, begun=NOW - 2.5)
    assert [attribution.failed("d", "a", NOW + 0.4 + i / 5, BUDGET, begun=NOW + 0.2 + i / 5)
            for i in range(10)] == [True] * 10


def test_a_poisoners_own_answers_do_not_make_its_failures_count() -> None:
    """A poisoner that also sends requests that succeed: its failures stay its own while the
    others are answered (a rule on each tenant's own run of failures restarted it at each of
    its successes: 150 of 150 counted in the re-audit)."""
    attribution = Attribution()
    counted = []
    for i in range(150):
        at = NOW + i * 0.2
        attribution.served("d", "a", at)
        attribution.served("d", "p", at + 0.05)
        counted.append(attribution.failed("d", "p", at + 0.1, BUDGET))
    assert counted == [False] * 150


def test_a_blip_of_another_tenant_does_not_make_them_count() -> None:
    """One failure among a's 50 answers is within what the ranker reads as noise: b's poison
    stays b's."""
    attribution = Attribution()
    _served(attribution, "a", 50)
    _failed(attribution, "a", 1)
    assert _interleaved(attribution, "b", ["a"], 20) == [False] * 20


def test_an_outage_failing_every_tenant_counts_after_a_few_of_the_others_failures() -> None:
    attribution = Attribution()
    for _ in range(50):
        _served(attribution, "a", 1)
        _served(attribution, "b", 1)
    counted = []
    for _ in range(10):
        counted += _failed(attribution, "a", 1) + _failed(attribution, "b", 1)
    assert counted[:2] == [False, False]
    assert all(counted[6:]), counted  # from each tenant's fourth failure at the latest


def test_they_count_again_once_nobody_else_was_served_for_the_window() -> None:
    policy = AttributionPolicy()
    attribution = Attribution(policy)
    _served(attribution, "a", 20)
    assert _failed(attribution, "b", 1) == [False]
    later = NOW + policy.window_s + policy.window_s / policy.window_slots
    assert _failed(attribution, "b", 1, now=later) == [True]


def test_deployments_are_kept_apart() -> None:
    attribution = Attribution()
    _served(attribution, "a", 20, deployment="d")
    assert _failed(attribution, "b", 1, deployment="e") == [True]
    assert _failed(attribution, "b", 1, deployment="d") == [False]


def test_a_tenant_pushed_out_takes_its_verdicts_with_it() -> None:
    """Only `max_principals` tenants are kept apart; one pushed out leaves the deployment's
    counts too. Kept there as everyone's, the poisoner's own failures, pushed out between two
    of its requests by many other tenants, stood no longer alone: with 64 others, 117 of 120
    counted (the re-audit of 2026-12-07)."""
    attribution = Attribution(AttributionPolicy(max_principals=4))
    others = [f"t{i}" for i in range(10)]
    counted = []
    for i in range(100):  # five others heard between two of p's requests: p is pushed out
        for j in range(5):
            _served(attribution, others[(5 * i + j) % len(others)], 1)
        counted += _failed(attribution, "p", 1)
    assert counted == [False] * 100


def test_the_test_is_the_rankers() -> None:
    assert AttributionPolicy().error_z == ScoringConfig().error_z
    assert not over_budget(Counts(0, 50, 1), BUDGET, 1.0)  # 2% of 50: within one stderr
    assert over_budget(Counts(0, 50, 3), BUDGET, 1.0)
    assert not over_budget(Counts(0, 0, 0), BUDGET, 1.0)


def _outcome(tenant: str, deployment: str, failed: bool, at: float) -> Outcome:
    if failed:
        error = errors.ProviderUnavailableError("upstream returned 500",
                                                code="upstream_unavailable")
        attempt = AttemptRecord(deployment, 1, at, "first", "failed", ended_at=at + 0.01,
                                error=error)
        return Outcome(request_id="r", tenant=tenant, requested_model=deployment, stream=True,
                       arrived_at=at, task="chat", ended_at=at + 0.02, status=500,
                       error_type=type(error).__name__, attempts=[attempt])
    attempt = AttemptRecord(deployment, 1, at, "first", "won", first_content_at=at + 0.01,
                            ended_at=at + 0.02)
    return Outcome(request_id="r", tenant=tenant, requested_model="auto", stream=True,
                   arrived_at=at, task="chat", deployment=deployment, first_content_at=at + 0.01,
                   first_token_at=at + 0.01, last_token_at=at + 0.02, ended_at=at + 0.02,
                   prompt_tokens=5, completion_tokens=3, attempts=[attempt])


def _availability(slo: SloTracker, deployment: str | None) -> tuple[int, int]:
    """(total, bad) of `chat`'s availability over the shortest window, of the task or of one
    deployment."""
    chat = next(t for t in slo.snapshot().tasks if t.task == "chat")
    if deployment is None:
        windows = chat.windows
    else:
        windows = next(d for d in chat.deployments if d.deployment == deployment).windows
    window = min(windows, key=lambda w: w.window_s)
    sli = next(s for s in window.slis if s.sli == "availability")
    return sli.total, sli.bad


def _sink() -> tuple[RecordingStore, SloTracker, StatsSink]:
    store = RecordingStore()
    slo = SloTracker({"chat": SloTargets(availability=0.995)})
    return store, slo, StatsSink(store, slo)


def test_the_sink_leaves_one_tenants_failures_out_of_the_deployment_s_statistics() -> None:
    """b's ten failed requests on `d`, with a served there: the store sees a's answers only,
    `d`'s SLO series no failure; the task's SLO counts b's failures, which its clients got."""
    store, slo, sink = _sink()
    start = time.perf_counter()
    for i in range(20):
        sink.record(_outcome("a", "d", failed=False, at=start + i * 0.001))
    for i in range(10):
        sink.record(_outcome("b", "d", failed=True, at=start + 0.1 + i * 0.002))
        sink.record(_outcome("a", "d", failed=False, at=start + 0.101 + i * 0.002))
    assert [obs.error for obs in store.seen] == [None] * 30
    assert _availability(slo, "d") == (30, 0)
    assert _availability(slo, None) == (40, 10)


def test_the_sink_counts_a_lone_tenants_failures_as_before() -> None:
    store, slo, sink = _sink()
    start = time.perf_counter()
    for i in range(5):
        sink.record(_outcome("a", "d", failed=False, at=start + i * 0.001))
    for i in range(5):
        sink.record(_outcome("a", "d", failed=True, at=start + 0.1 + i * 0.001))
    assert [obs.error for obs in store.seen].count("ProviderUnavailableError") == 5
    assert _availability(slo, "d") == (10, 5)


def test_a_window_taken_out_late_is_aligned_with_the_total() -> None:
    """A verdict filed late (at its attempt's time, when its request ended) paired the dropped
    window's slot with the total's 30 s newer one and took another tenant's verdict out (the
    re-audit)."""
    from router.execution.verdict_windows import Window

    total, dropped = Window(30.0, 15, NOW), Window(30.0, 15, NOW)
    total.add(NOW, failed=True)
    dropped.add(NOW, failed=True)
    for _ in range(5):
        total.add(NOW + 31.0, failed=True)
    total.remove(dropped, NOW + 1.0)
    assert total.counts(NOW + 31.0) == (5, 5)


def test_a_failure_filed_late_stays_the_poisoners_own() -> None:
    """Attempts are filed when their request ends: P's failed attempt, filed 1 s later (its
    fallback elsewhere took that long), came after T's newer verdicts; counted at its own time
    it went into the deployment's current slot and P's older one, expired from P's first, and
    P's own failures read as T's (30 of 160 counted in the re-audit). T never fails."""
    attribution = Attribution()
    filed: list[tuple[float, str, float, float]] = []  # (filed at, tenant, begun, ended)
    filed += [(k + 0.3, "t", float(k), k + 0.3) for k in range(100)]
    filed += [(x + 1.05, "p", x, x + 0.05) for x in (i / 4 for i in range(160, 320))]
    counted = []
    for _, tenant, begun, ended in sorted(filed):
        if tenant == "t":
            attribution.served("d", "t", ended, begun=begun)
        elif attribution.failed("d", "p", ended, 0.01, begun=begun):
            counted.append(ended)
    assert counted == []
