"""One upstream attempt's record: which deployment, when it started, first content, end, error.

Times are `time.perf_counter()` seconds. TTFT of an attempt runs from its start to its first
content chunk (DESIGN.md §1). `kind` says why the attempt was made (first try, retry of the
same deployment, fallback to another, hedge); `outcome` how it ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from router.errors import (
    OverloadedError,
    ProviderRejectedError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SlorouterError,
)
from router.execution.breaker import REGULAR, Permit
from router.providers.base import Usage

AttemptKind = Literal["first", "retry", "fallback", "hedge"]
AttemptOutcome = Literal["pending", "won", "failed", "cancelled", "skipped"]


def saturated(message: str) -> ProviderUnavailableError:
    """The error of an attempt skipped because its deployment had its `max_in_flight` attempts
    in flight (the bulkhead), and of a request every deployment turned away so: a 503 with
    `Retry-After` 1 s (a slot frees whenever one of the attempts ends, a time no one knows),
    spread like admission's (`spread_retry_after`): with the same second for every client
    refused at once, the SDKs' retries came back together and were refused again."""
    return ProviderUnavailableError(message, code="deployment_saturated", retry_after=1.0,
                                    spread_retry_after=True)


SATURATED = saturated("").code  # the code such skips are counted by


def circuit_open(retry_after: float | None) -> ProviderUnavailableError:
    """The error of an attempt skipped because its deployment's circuit is open (`retry_after`:
    until its breaker admits a probe again)."""
    return ProviderUnavailableError("circuit open", code="circuit_open", retry_after=retry_after)


def retry_budget_spent() -> OverloadedError:
    """Why a retry or fallback that was due was not made: the retry budget had no token left.
    Recorded on a skipped attempt (counted by `slorouter.retry_budget.refusals`); the client
    gets the error of the attempts that failed, its message saying the budget ended them."""
    return OverloadedError("retry budget exhausted", code="retry_budget_exhausted")


RETRY_BUDGET_SPENT = retry_budget_spent().code  # the code such refusals are counted by


def hedge_budget_spent() -> OverloadedError:
    """Why a hedge that was due was not sent: the hedge budget had no token left. Recorded on a
    skipped `hedge` attempt (counted by `slorouter.hedges.skipped`), never sent to a client."""
    return OverloadedError("hedge budget exhausted", code="hedge_budget_exhausted")


# The codes of attempts a budget refused: never a candidate passed over (each follows an attempt)
BUDGET_SPENT = frozenset({RETRY_BUDGET_SPENT, hedge_budget_spent().code})


@dataclass(slots=True)
class AttemptRecord:
    deployment: str
    number: int
    started_at: float
    kind: AttemptKind = "first"
    outcome: AttemptOutcome = "pending"
    first_content_at: float | None = None
    ended_at: float | None = None
    error: SlorouterError | None = None
    usage: Usage | None = None
    # What the provider may bill for this attempt: the answer's usage priced (the winner), or,
    # for an attempt sent and then cancelled, cut by a timeout or left unanswered by its
    # upstream (`sent_unanswered`), its prompt at the input price from the router's estimate
    # (`cost_estimated`). None: nothing billed (an error answer, an attempt never sent).
    cost_usd: float | None = None
    cost_estimated: bool = False
    ticket: int = 0  # the attempt watch's ticket (`ExecutionState.watch`)
    share_ticket: int = 0  # its place on a capped deployment (`ExecutionState.shares`); 0: none
    # A won stream its client left before the end: the answer was cut short, not given whole
    # (the telemetry's `cancelled`); its first token still counts as the deployment's.
    abandoned: bool = False
    # A won stream still writing when the deployment's timeout (or the operator's deadline)
    # cut it (`runner.progressing`): its length was the request's, not a failure of the
    # deployment; no breaker failure, and no error in the deployment's statistics.
    outlasted: bool = False
    permit: Permit = REGULAR  # what its deployment's breaker admitted it with (`allow()`)
    judged: bool = False  # its failure counted against its deployment (its breaker's failure)

    @property
    def passed_over(self) -> bool:
        """A candidate skipped for its state (circuit open, or at its `max_in_flight`), not an
        attempt a budget refused nor a hedge not sent: those only follow an attempt made."""
        return (self.outcome == "skipped" and self.kind != "hedge"
                and (self.error is None or self.error.code not in BUDGET_SPENT))

    @property
    def refused_by_retry_budget(self) -> bool:
        """A retry or fallback that was due after a failure and that the retry budget refused
        (never made)."""
        return self.error is not None and self.error.code == RETRY_BUDGET_SPENT

    @property
    def ttft_s(self) -> float | None:
        if self.first_content_at is None:
            return None
        return self.first_content_at - self.started_at

    @property
    def error_class(self) -> str | None:
        return type(self.error).__name__ if self.error is not None else None

    @property
    def refused_request(self) -> bool:
        """The provider refused the request itself (a 400 or 422: `ProviderRejectedError`), the
        caller's to fix: its breaker does not count it, nor its statistics unless another
        deployment then answered the same request (`StatsSink.record`), or one tenant's
        malformed requests would move every tenant's traffic."""
        return isinstance(self.error, ProviderRejectedError)

    @property
    def failed_in_router(self) -> bool:
        """The router itself could not make the attempt (out of file descriptors:
        `OverloadedError`), nothing sent: no verdict on the deployment either."""
        return isinstance(self.error, OverloadedError)

    @property
    def cut_by_client_deadline(self) -> bool:
        """Ended by the client's own deadline, shorter than the deployment's timeout (the
        runner's `deadline_exceeded`): it says nothing about the deployment, so neither its
        breaker nor its statistics count it as a failure."""
        error = self.error
        return isinstance(error, ProviderTimeoutError) and error.code == "deadline_exceeded"
