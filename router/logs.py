"""Structured JSON logs: one line per event, with named events and their data, never text.

Log records carry an event name as the message and their fields in `extra={"event_data": ...}`.
Callers must never put prompt or completion text, or secrets, into either.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import orjson


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        data = getattr(record, "event_data", None)
        if isinstance(data, dict):
            line.update(data)
        if record.exc_info and record.exc_info[0] is not None:
            # The class and the frames, never the message: messages can echo request text.
            line["exception"] = record.exc_info[0].__name__
            line["traceback"] = "".join(traceback.format_tb(record.exc_info[2]))
        return orjson.dumps(line, default=str).decode()


def configure(level: str = "info", *, access_log: bool = False) -> None:
    """JSON lines on stderr at `level`; the access log (`request_finished`, one line per
    request) when `access_log` is set or the level is debug."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    on = access_log or level.lower() == "debug"
    logging.getLogger("slorouter.access").setLevel(logging.INFO if on else logging.WARNING)
    for noisy in ("LiteLLM", "litellm", "httpx", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.showwarning = warning_event


def warning_event(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A Python warning as a `python_warning` event: its class and where, never its text
    (pydantic's serializer warnings quote the values they met: a provider's answer text)."""
    event(logging.getLogger("py.warnings"), "python_warning", logging.WARNING,
          category=category.__name__, filename=filename, lineno=lineno)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **data: object) -> None:
    logger.log(level, name, extra={"event_data": data})


@dataclass
class ThrottledEvent:
    """A recurring failure's event, logged at most once per `interval_s` with how many were
    left out since the last line (`suppressed`): a store that is down for everyone must not
    log once per request."""

    logger: logging.Logger
    name: str
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _last: float | None = field(default=None, init=False)
    _suppressed: int = field(default=0, init=False)

    def report(self, level: int = logging.WARNING, **data: object) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            self._suppressed += 1
            return
        event(self.logger, self.name, level, suppressed=self._suppressed, **data)
        self._last, self._suppressed = now, 0
