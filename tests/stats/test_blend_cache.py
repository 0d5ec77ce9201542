"""`BlendCache` reuses a candidate's request-independent blend only while it was made from the
same summaries and prior, less than `reuse_s` ago; what the request brings (prompt size, output
tokens, a waiting attempt's age) is applied to every prediction afresh."""

from __future__ import annotations

import pytest

from router.scoring import Candidate, ScoreRequest, ScoringConfig, predict
from router.scoring.blend_cache import BlendCache
from router.scoring.predict import blend
from router.scoring.types import Blend, Prior
from router.slo import SloTargets
from router.stats import LocalStatsStore, Observation, prompt_bucket
from tests.stats.sim import FakeClock

CONFIG = ScoringConfig()
TARGETS = SloTargets(ttft_p95_s=0.5, tpot_p95_s=0.05, e2e_p99_s=4.0, availability=0.99)


def _store() -> tuple[LocalStatsStore, FakeClock]:
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(400):
        prompt = (200, 900, 3000)[i % 3]
        ttft = 0.1 + 0.05 * prompt / 1000 + 0.01 * (i % 5)
        err = "ProviderTimeout" if i % 50 == 0 else None
        store.record(Observation("A", "chat", prompt, 60, None if err else ttft, 0.02,
                                 ttft + 1.2, 0.0, err, False, clock.now))
        clock.now += 0.01
    store.refresh()
    return store, clock


def _get(cache: BlendCache, store: LocalStatsStore, now: float, prompt: int = 900,
         prior: Prior = CONFIG.prior) -> Blend:
    return cache.get(("A", "chat", prompt_bucket(prompt)), store.view("A", "chat", prompt),
                     prior, CONFIG.error_z, now)


def test_a_blend_is_reused_within_its_lifetime_then_made_anew() -> None:
    store, clock = _store()
    cache = BlendCache(reuse_s=0.1)
    lifetime = cache.lifetime_s(("A", "chat", prompt_bucket(900)))
    assert 0.05 <= lifetime < 0.1
    first = _get(cache, store, clock.now)
    assert _get(cache, store, clock.now + lifetime * 0.99) is first
    later = _get(cache, store, clock.now + 0.11)
    assert later is not first and later == blend(store.view("A", "chat", 900), CONFIG.prior,
                                                 CONFIG.error_z, clock.now + 0.11)
    # A clock that went back does not reuse a blend from its future.
    assert _get(cache, store, clock.now + 0.05) is not later


def test_lifetimes_are_staggered_by_key_so_candidates_do_not_expire_together() -> None:
    cache = BlendCache(reuse_s=0.1)
    lifetimes = [cache.lifetime_s((f"dep-{i}", "chat", 3)) for i in range(10)]
    assert all(0.05 <= t < 0.1 for t in lifetimes)
    assert len({round(t, 4) for t in lifetimes}) >= 8
    assert lifetimes == [BlendCache(reuse_s=0.1).lifetime_s((f"dep-{i}", "chat", 3))
                         for i in range(10)]  # fixed per key, not per process


def test_new_summaries_or_another_prior_make_a_new_blend() -> None:
    store, clock = _store()
    cache = BlendCache(reuse_s=10.0)
    first = _get(cache, store, clock.now)
    assert _get(cache, store, clock.now, prior=Prior()) is first  # equal prior, other object
    other_prior = _get(cache, store, clock.now, prior=Prior(weight=10.0))
    assert other_prior is not first and other_prior.n0 == 10.0
    assert _get(cache, store, clock.now, prompt=3000) is not other_prior  # another bucket
    store.record(Observation("A", "chat", 900, 60, 0.9, 0.02, 2.1, 0.0, None, False,
                             clock.now))
    clock.now += 0.2
    store.refresh()
    assert _get(cache, store, clock.now - 0.2) is not _get(cache, store, clock.now - 0.2,
                                                           prior=Prior(weight=10.0))
    renewed = _get(cache, store, clock.now)
    assert renewed.at == clock.now and renewed.error_rate != first.error_rate


@pytest.mark.parametrize("prompt", [16, 900, 3000, 40_000])
def test_a_blend_made_now_predicts_bit_for_bit_as_predict_alone(prompt: int) -> None:
    store, clock = _store()
    view = store.view("A", "chat", prompt)
    candidate = Candidate("A", 1.0, 2.0, view)
    request = ScoreRequest("chat", "low", prompt, 128)
    made = candidate._replace(blend=blend(view, CONFIG.prior, CONFIG.error_z, clock.now))
    assert predict(made, request, 128, TARGETS, CONFIG, clock.now) == predict(
        candidate, request, 128, TARGETS, CONFIG, clock.now)


def test_a_reused_blend_is_late_only_by_its_decay_and_sees_waiting_attempts_now() -> None:
    store, clock = _store()
    start = clock.now
    request = ScoreRequest("chat", "low", 900, 128)
    early = blend(store.view("A", "chat", 900), CONFIG.prior, CONFIG.error_z, start)
    late = start + 0.099
    exact = predict(Candidate("A", 1.0, 2.0, store.view("A", "chat", 900)), request, 128,
                    TARGETS, CONFIG, late)
    reused = predict(Candidate("A", 1.0, 2.0, store.view("A", "chat", 900), blend=early),
                     request, 128, TARGETS, CONFIG, late)
    assert reused.ttft_q_s == pytest.approx(exact.ttft_q_s, rel=1e-3)
    assert reused.error_rate == pytest.approx(exact.error_rate, rel=0.02)
    assert reused.n_eff == pytest.approx(exact.n_eff, rel=0.015)
    # An attempt that started after the blend was made, waiting past the predicted p95: the
    # prediction made from the reused blend is censored at the attempt's age all the same.
    store.begin("A", start + 0.01, 900)
    clock.now = start + 0.01 + 2.0
    censored = predict(Candidate("A", 1.0, 2.0, store.view("A", "chat", 900), blend=early),
                       request, 128, TARGETS, CONFIG, clock.now)
    assert censored.censored_wait_s == pytest.approx(2.0)
    assert censored.ttft_q_s == pytest.approx(2.0) and censored.p_meet == 0.0
