"""`TelemetrySink`: the `OutcomeSink` that turns outcomes into spans and metrics, off the hot path.

`record(outcome)` only appends to a bounded queue (and, for the first outcome queued, schedules
a flush on the running event loop), so the request that records pays a few hundred nanoseconds,
not span construction. Flushes are at least `flush_delay_s` apart, so a busy service batches
outcomes; when the last flush is older than that (a quiet service), the flush runs as soon as
the loop is free, in the same wake-up as the request that recorded (handlers record once the
answer is on its way), instead of waking an idle process again 50 ms later. `flush()` drains
the queue: one `RouterMetrics.record` and, for sampled traces, one span tree per outcome.
Outcomes are not changed after `record` (the handler records each exactly once, in its
`finally`). An outcome without a `trace` (the handler did not call `start_trace`) still gets a
span tree, as a new root. Whatever is logged while an outcome is processed (an SDK's warning,
`telemetry_record_failed`) names that outcome's request: flushes run in a context of their own,
in which `current_request` is each outcome in turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque

from router.outcomes import Outcome
from router.telemetry.attributes import trace_of
from router.telemetry.context import current_request, start_trace
from router.telemetry.metrics import RouterMetrics
from router.telemetry.spans import SpanBuilder

log = logging.getLogger("slorouter.telemetry")


class TelemetrySink:
    def __init__(self, metrics: RouterMetrics | None, spans: SpanBuilder | None,
                 flush_delay_s: float = 0.05, queue_max: int = 20_000,
                 sample_ratio: float = 1.0) -> None:
        self._metrics = metrics
        self._spans = spans
        self._delay = flush_delay_s
        self._queue: deque[Outcome] = deque()
        self._max = queue_max
        self._scheduled = False
        self._last_flush = float("-inf")  # loop time
        self._ratio = sample_ratio
        self.dropped = 0

    def record(self, outcome: Outcome) -> None:
        if len(self._queue) >= self._max:
            self.dropped += 1
            if self._metrics is not None:
                self._metrics.dropped.add(1)
            return
        self._queue.append(outcome)
        if not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script, a sync test): do the work now
            self.flush()
            return
        self._scheduled = True
        wait = self._last_flush + self._delay - loop.time()
        # A fresh context, not the recording request's (the loop's default copies it): a batch
        # ran as that request, so lines logged for the others named its ids.
        if wait > 0.0:
            loop.call_later(wait, self._flush_on, loop, context=contextvars.Context())
        else:
            loop.call_soon(self._flush_on, loop, context=contextvars.Context())

    def _flush_on(self, loop: asyncio.AbstractEventLoop) -> None:
        self._last_flush = loop.time()
        self.flush()

    def flush(self) -> int:
        """Process every queued outcome; returns how many were processed."""
        self._scheduled = False
        done = 0
        while self._queue:
            outcome = self._queue.popleft()
            # each outcome's lines name its own request (`redact.TraceLogFilter`), its failure's
            # too; reset after, as `flush` is also called inside other requests (a scrape)
            served = current_request.set(outcome)
            try:
                self._process(outcome)
            except Exception:  # telemetry must never break serving
                log.exception("telemetry_record_failed")
            finally:
                current_request.reset(served)
            done += 1
        return done

    def _process(self, outcome: Outcome) -> None:
        if self._metrics is not None:
            self._metrics.record(outcome)
        if self._spans is None:
            return
        trace = trace_of(outcome)
        if trace is None:  # the request path did not start a trace: a new root, not propagated
            trace = start_trace(None, ratio=self._ratio)
        self._spans.export(outcome, trace)
