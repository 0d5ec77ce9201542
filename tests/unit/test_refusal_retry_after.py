"""The jittered `retry-after-ms` belongs to the router's own refusals for want of room (admission,
the bulkhead), whatever their code.

Clients refused together by admission control, or by a deployment at its `max_in_flight`, must
not all come back at once, so their wait is spread (`router.api.errors.error_response`). An error
with the same code from anywhere else (an upstream's, mapped or relayed) keeps the plain
`Retry-After` it was given: whether an error is such a refusal is read from the error
(`refused_by_admission`, `spread_retry_after`, set where it is raised), never from its code.
"""

from __future__ import annotations

import pytest

from router.admission.config import PoolLimits
from router.admission.pool import Pool
from router.api.errors import error_response
from router.errors import (
    OverloadedError,
    ProviderRejectedError,
    ProviderUnavailableError,
    SlorouterError,
    TenantRateLimitedError,
)
from router.execution.attempt import saturated

RETRY_AFTER_S = 2.0


async def _admission_refusals() -> list[SlorouterError]:
    """A full pool's refusals, raised by the pool itself: queue full, tenant at its cap."""
    limits = PoolLimits(max_concurrency=1, max_queue=0, max_queue_wait_s=0.0,
                        max_concurrency_per_tenant=1, retry_after_min_s=RETRY_AFTER_S,
                        retry_after_max_s=RETRY_AFTER_S)
    pool = Pool("interactive", limits)
    await pool.acquire("holder", 0.0)
    refusals: list[SlorouterError] = []
    for tenant in ("newcomer", "holder"):
        with pytest.raises((OverloadedError, TenantRateLimitedError)) as caught:
            await pool.acquire(tenant, 0.0)
        refusals.append(caught.value)
    return refusals


async def test_admissions_own_refusals_get_a_spread_out_retry_after_ms() -> None:
    """Both refusals are marked as admission's, and answered with `retry-after-ms` between the
    estimated wait and twice it."""
    refusals = await _admission_refusals()
    assert [(e.code, e.refused_by_admission) for e in refusals] == [
        ("overloaded", True), ("tenant_over_share", True)]
    for refusal in refusals:
        waited_ms = int(error_response(refusal).headers["retry-after-ms"])
        assert RETRY_AFTER_S * 1000 <= waited_ms <= 2 * RETRY_AFTER_S * 1000


def test_a_full_deployments_refusal_gets_a_spread_out_retry_after_ms() -> None:
    """The bulkhead's `deployment_saturated` (a place frees at no known time) is spread like
    admission's refusals: between its 1 s and 2 s (`Retry-After` that rounded up), and it is not
    counted as admission's."""
    refusal = saturated("every deployment that could serve has its max_in_flight attempts")
    assert not refusal.refused_by_admission
    waits = set()
    for _ in range(20):
        headers = error_response(refusal).headers
        waited_ms = int(headers["retry-after-ms"])
        assert 1000 <= waited_ms <= 2000
        assert headers["retry-after"] in {"1", "2"}
        waits.add(waited_ms)
    assert len(waits) > 1


@pytest.mark.parametrize("error", [
    ProviderUnavailableError("upstream returned 529: overloaded", code="overloaded",
                             retry_after=RETRY_AFTER_S),
    ProviderRejectedError("upstream returned 400: busy", code="queue_timeout",
                          retry_after=RETRY_AFTER_S),
    OverloadedError("the idempotency store is unavailable", code="idempotency_store_unavailable",
                    retry_after=RETRY_AFTER_S),
    ProviderUnavailableError("upstream returned 503: busy", code="deployment_saturated",
                             retry_after=RETRY_AFTER_S),
], ids=lambda e: f"{type(e).__name__}-{e.code}")
def test_an_error_with_an_admission_code_from_elsewhere_keeps_its_plain_retry_after(
        error: SlorouterError) -> None:
    """No `retry-after-ms` and no jitter: `Retry-After` is the wait the error was given."""
    headers = error_response(error).headers
    assert "retry-after-ms" not in headers
    assert headers["retry-after"] == "2"


@pytest.mark.parametrize("spread", [False, True])
def test_no_client_is_told_to_wait_more_than_a_minute(spread: bool) -> None:
    """An upstream's `retry-after: 3600` was relayed as it came, and a `circuit_open` spread to
    twice a long hold: openai-node sleeps out any hint, deaf to an abort (the JavaScript SDK
    audit). The hint is capped at 60 s, the most openai-python honours."""
    err = ProviderUnavailableError("quota exhausted", retry_after=3600.0)
    err.spread_retry_after = spread
    headers = error_response(err).headers
    assert headers["retry-after"] == "60"
    assert headers.get("retry-after-ms") == ("60000" if spread else None)
    assert error_response(ProviderUnavailableError("busy", retry_after=7.0)).headers[
        "retry-after"] == "7"
