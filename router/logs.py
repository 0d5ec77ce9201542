"""Structured JSON logs: one line per event, with named events and their data, never text.

Log records carry an event name as the message and their fields in `extra={"event_data": ...}`.
Callers must never put prompt or completion text, or secrets, into either.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
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
    handler.addFilter(Throttle(THROTTLED_LOGGERS))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    on = access_log or level.lower() == "debug"
    logging.getLogger("slorouter.access").setLevel(logging.INFO if on else logging.WARNING)
    # openai: the SDK under litellm logs an upstream's `x-request-id` header as is at debug
    for noisy in ("LiteLLM", "litellm", "httpx", "openai", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.showwarning = warning_event
    threading.excepthook = thread_error_event


# Warnings whose whole text is the interpreter's own words and a code name, never data: kept.
_FIXED_WARNINGS = re.compile(r"coroutine '[\w.<>]+' was never awaited")


def warning_event(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A Python warning as a `python_warning` event: its class and where, and its text only
    when it is one of `_FIXED_WARNINGS` (which coroutine was never awaited: litellm's, when a
    call is cancelled); other texts can quote data (pydantic's serializer warnings quote the
    values they met: a provider's answer text)."""
    text = str(message)
    data: dict[str, object] = {"category": category.__name__, "filename": filename,
                               "lineno": lineno}
    if _FIXED_WARNINGS.fullmatch(text):
        data["message"] = text
    event(logging.getLogger("py.warnings"), "python_warning", logging.WARNING, **data)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **data: object) -> None:
    logger.log(level, name, extra={"event_data": data})


_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
# asyncio's and uvloop's own words for an error nothing caught, which their messages start with
# before what they format in (a task's repr with its exception's text, a callback's with its
# arguments); another message is logged as "other".
LOOP_ERRORS = (
    "Task exception was never retrieved", "Future exception was never retrieved",
    "Exception in callback", "Task was destroyed but it is pending",
    "Fatal error on transport", "Fatal read error on socket transport",
    "Fatal write error on socket transport", "Fatal error on SSL transport",
    "Error on reading from the event loop self-pipe", "Unhandled exception in event loop",
    "an error occurred during closing of asynchronous generator",
    # aiohttp's, for a client session or connector collected unclosed (litellm's clients)
    "Unclosed client session", "Unclosed connector", "Unclosed connection",
)
# Libraries that log a line per failed attempt of their own retries (an OTLP exporter whose
# collector is down logs two a second): at most one line per logger per `Throttle.interval_s`.
THROTTLED_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk")


def loop_error_event(loop: asyncio.AbstractEventLoop, context: Mapping[str, object]) -> None:
    """The event loop's handler of an error nothing else caught (a task's exception never
    retrieved, a callback that raised): an `event_loop_error` event with asyncio's own words
    (`LOOP_ERRORS`) and the exception's class and frames (`JsonFormatter`). asyncio's default
    handler logged the reprs it formats in, and with them the exception's text and a
    callback's arguments, which can hold request or answer text."""
    message = str(context.get("message", ""))
    what = next((words for words in LOOP_ERRORS if message.startswith(words)), "other")
    logging.getLogger("asyncio").error("event_loop_error",
                                       exc_info=_exc_info(context.get("exception")),
                                       extra={"event_data": {"what": what}})


def thread_error_event(args: threading.ExceptHookArgs) -> None:
    """An exception that ended a thread (an exporter's, an executor's): a `thread_error` event
    with the thread's name and the exception's class and frames, through the service's
    handlers (and their redaction). Python's default hook printed its text to stderr past them.
    A thread ended by `SystemExit` is quiet, as with the default hook."""
    if args.exc_type is SystemExit:
        return
    logging.getLogger("threading").error(
        "thread_error", exc_info=_exc_info(args.exc_value),
        extra={"event_data": {"thread": args.thread.name if args.thread is not None else ""}})


def _exc_info(error: object) -> _ExcInfo | None:
    if not isinstance(error, BaseException):
        return None
    return type(error), error, error.__traceback__


class Throttle(logging.Filter):
    """Lets through at most one record per `interval_s` from each logger under `prefixes`,
    with how many it held back since the last one (`suppressed`); others pass untouched."""

    def __init__(self, prefixes: tuple[str, ...], interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._prefixes, self._interval_s, self._clock = prefixes, interval_s, clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if not name.startswith(self._prefixes):
            return True
        now = self._clock()
        last = self._last.get(name)
        if last is not None and now - last < self._interval_s:
            self._held[name] = self._held.get(name, 0) + 1
            return False
        self._last[name] = now
        data = getattr(record, "event_data", None)
        record.event_data = {**(data if isinstance(data, dict) else {}),
                             "suppressed": self._held.pop(name, 0)}
        return True


@dataclass
class ThrottledEvent:
    """A recurring failure's event, logged at most once per `interval_s` with how many were
    left out since the last line (`suppressed`): a store that is down for everyone must not
    log once per request."""

    logger: logging.Logger
    name: str
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    # The event logged (INFO) by `recovered` after failures: how long and how many.
    recovered_name: str | None = None
    _last: float | None = field(default=None, init=False)
    _suppressed: int = field(default=0, init=False)
    _failing_since: float | None = field(default=None, init=False)
    _failures: int = field(default=0, init=False)

    def report(self, level: int = logging.WARNING, **data: object) -> None:
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        self._failures += 1
        if self._last is not None and now - self._last < self.interval_s:
            self._suppressed += 1
            return
        event(self.logger, self.name, level, suppressed=self._suppressed, **data)
        self._last, self._suppressed = now, 0

    def recovered(self) -> None:
        """What failed works again: after failures, one `recovered_name` line with how long it
        failed (`failing_s`) and how often (`failures`); nothing otherwise (a field read)."""
        if self._failing_since is None:
            return
        if self.recovered_name is not None:
            event(self.logger, self.recovered_name, failures=self._failures,
                  failing_s=round(self.clock() - self._failing_since, 3))
        self._failing_since, self._failures, self._last, self._suppressed = None, 0, None, 0
