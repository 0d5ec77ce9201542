"""Backend failures turned into counted misses, logged at most once per interval.

`FailureLog.report(exc)` counts every failure in the metrics and emits one structured warning
per `interval_s` (with the number of failures suppressed since the last one), so a backend that
is down does not flood the logs. The clock is injected.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cache.metrics import CacheMetrics

logger = logging.getLogger("slorouter.cache")


@dataclass
class FailureLog:
    """Counts a backend's failures and logs the first of each interval."""

    backend: str
    metrics: CacheMetrics
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _last_logged: float | None = field(default=None, init=False)
    _suppressed: int = field(default=0, init=False)
    _failing_since: float | None = field(default=None, init=False)
    _failures: int = field(default=0, init=False)

    def report(self, operation: str, exc: BaseException) -> None:
        """Count one failure; log it unless one was logged less than `interval_s` ago."""
        self.metrics.record_backend_error(self.backend)
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        self._failures += 1
        if self._last_logged is not None and now - self._last_logged < self.interval_s:
            self._suppressed += 1
            return
        logger.warning(
            "cache_backend_error",
            extra={  # the structured fields, in the shape router.logs writes out
                "event_data": {
                    "backend": self.backend,
                    "operation": operation,
                    "error": type(exc).__name__,
                    # the system's or SQLite's fixed words ("database or disk is full"), never
                    # a message that could hold a key or an answer
                    "reason": _reason(exc),
                    "suppressed": self._suppressed,
                }
            },
        )
        self._last_logged, self._suppressed = now, 0

    def answered(self) -> None:
        """A call succeeded: after failures, one `cache_backend_recovered` line (INFO) with how
        long the backend failed and how many calls did, so an outage's end is in the log as its
        start is. A dict read when nothing failed."""
        if self._failing_since is None:
            return
        logger.info("cache_backend_recovered", extra={"event_data": {
            "backend": self.backend, "failures": self._failures,
            "failing_s": round(self.clock() - self._failing_since, 3)}})
        self._failing_since, self._failures, self._last_logged = None, 0, None
        self._suppressed = 0

    def note(self, what: str) -> None:
        """Log a one-off event of the backend (`what`), at WARNING."""
        logger.warning("cache_backend_" + what, extra={"event_data": {"backend": self.backend}})


def _reason(exc: BaseException) -> str | None:
    """An OSError's errno name (`ENOSPC`), an SQLite error's code name (`SQLITE_FULL`)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno)
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else None
