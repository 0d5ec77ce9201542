"""What happened to one request, recorded once in a `finally`, and where records go.

An `Outcome` carries ids, classes, timings, token counts and cost: never prompt or completion
text. Sinks receive every outcome (also for failed and disconnected requests); the latency
feedback, telemetry and experiment issues add sinks beside the structured log one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

import orjson

from router.execution.attempt import AttemptRecord
from router.stats.observation import tpot_s
from router.telemetry.context import TraceContext

log = logging.getLogger("slorouter.outcome")
# One `request_finished` line per request: on with `serve --access-log` or `--log-level debug`
# (`router.logs.configure`), off otherwise (a JSON line costs tens of microseconds a request).
access_log = logging.getLogger("slorouter.access")


CLIENT_CLOSED = 499  # `status` of a request whose client left (nginx's convention)
# `requested_model` of a request naming a model the configuration does not know (free text)
UNKNOWN_MODEL = "unknown"


@dataclass(slots=True)
class Outcome:
    request_id: str
    tenant: str
    requested_model: str
    stream: bool
    arrived_at: float
    task: str | None = None
    risk: str | None = None
    model: str | None = None
    deployment: str | None = None
    policy_version: str | None = None
    cache: str = "bypass"
    # The decision was acted on: the request went past the idempotency claim to the cache
    # lookup and, unless the cache answered, upstream. False for a request refused or answered
    # before that (a reused or in-flight Idempotency-Key, a replayed duplicate, admission).
    routed: bool = False
    experiment: str | None = None
    arm: str | None = None
    arm_degraded: bool = False  # the arm's route could not serve; control's route did
    arm_ineligible: bool = False  # degraded as the policy bars the arm's model, not as it is down
    explored: bool = False  # routed as an exploration probe (see `router/scoring/rank.py`)
    idempotent_replay: bool = False  # answered from its Idempotency-Key's record
    # ... and the deployment that answered the request whose record it is (its span names it;
    # `deployment` stays None: nothing answered this request, so no provider's metrics count it)
    replayed_from: str | None = None
    trace: TraceContext | None = None
    steps: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end)
    queue_s: float | None = None
    status: int = 200
    error_type: str | None = None
    error_code: str | None = None  # the error's `code` (e.g. `queue_timeout`), as the client got it
    # Refused by the router's own admission control (`SlorouterError.refused_by_admission`), not
    # by an upstream whose error has the same code: what `slorouter.admission.rejections` counts.
    refused_by_admission: bool = False
    # The client's own timeout set the deadline (`Plan.deadline_from_client`), and how long an
    # attempt may wait before its wait is a stall (`Plan.stall_after_s`): together they tell a
    # request the client's impatience ended from one the service failed (`cut_by_client`).
    deadline_from_client: bool = False
    stall_after_s: float | None = None
    # When a hedge was to start if the first attempt had no first content by then
    # (`Plan.hedge_delay_s`; None: the request was not to be hedged).
    hedge_delay_s: float | None = None
    first_content_at: float | None = None
    ended_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    prompt_tokens: int | None = None  # as the provider's usage reports them
    prompt_estimate: int | None = None  # the router's count, which the decision read
    completion_tokens: int | None = None  # of every choice (`n`), as usage reports them
    choices: int = 1  # the request's `n`: choices decoded side by side
    # A stream's longest choice's share of its content chunks, with `n` > 1 (None otherwise)
    longest_choice_share: float | None = None
    # The provider reported no usage (a stream cut, or left by its client): `completion_tokens`
    # holds the content chunks the relay counted, not a token count (a provider sending k
    # tokens a chunk reads k times fewer).
    chunks_counted: bool = False
    cached_tokens: int | None = None  # prompt tokens the provider read from its prompt cache
    cost_usd: float | None = None
    # True when `cost_usd` is the router's estimate, not the provider's usage priced: a stream
    # that ended without usage (cut, or left by its client) is billed all the same, so it is
    # priced from the usage's prompt tokens, else the router's prompt estimate, and the chunks;
    # a non-streamed request left by its client mid-call, from the prompt estimate alone. The
    # cost also sums the attempts sent and left unanswered (`add_unanswered_costs`), estimated.
    cost_estimated: bool = False
    client_disconnected: bool = False
    # A side effect that failed after its upstream had it, unjudged by the runner (interrupted
    # in flight, or broken after the upstream's 200): it may have taken effect (`Settle.failed`).
    may_have_taken_effect: bool = False
    attempts: list[AttemptRecord] = field(default_factory=list)
    # Request and answer messages as JSON, set only for a tenant opted in to content capture
    # (`capture_content_tenants`): read by the server span, never by logs (`summary`).
    captured_input: str | None = field(default=None, repr=False)
    captured_output: str | None = field(default=None, repr=False)

    @property
    def reported_completion_tokens(self) -> int | None:
        """Output tokens as the provider reported them (None when only chunks were counted):
        what telemetry's token counts show."""
        return None if self.chunks_counted else self.completion_tokens

    def add_unanswered_costs(self) -> None:
        """Add to `cost_usd` what the attempts sent and left unanswered (a hedge's loser, an
        attempt cut by a timeout, one its client left, one its upstream dropped or its adapter
        timed out waiting for) may be billed: each priced by the runner
        from the router's prompt estimate, so the total is marked estimated. Called once, as
        the outcome is recorded; the answering attempt's own cost is already in `cost_usd`."""
        for attempt in self.attempts:
            if attempt.cost_usd is not None and attempt.outcome != "won":
                self.cost_usd = (self.cost_usd or 0.0) + attempt.cost_usd
                self.cost_estimated = True

    @property
    def sent_status(self) -> int:
        """The HTTP status the client got: 200 for a stream that broke after its head was sent
        (`status` is then the error it ended with, in an error event), else `status`."""
        begun_stream = self.stream and self.first_content_at is not None
        if begun_stream and self.status not in (200, CLIENT_CLOSED):
            return 200
        return self.status

    @property
    def cut_by_client(self) -> bool:
        """The client's own timeout, shorter than the service's, ended the request before it
        had waited long enough to be a stall (`stall_after_s`): the client's choice, as leaving
        is, not a failure of the service (a stall it cut still is one)."""
        if not (self.deadline_from_client and self.error_code == "deadline_exceeded"):
            return False
        waited = (self.ended_at or self.arrived_at) - self.arrived_at
        return self.stall_after_s is None or waited <= self.stall_after_s

    @property
    def winner(self) -> AttemptRecord | None:
        """The attempt whose answer the client got, if any attempt answered."""
        return next((a for a in self.attempts if a.outcome == "won"), None)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_content_at is None else self.first_content_at - self.arrived_at

    @property
    def e2e_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.arrived_at

    @property
    def tokens_per_choice(self) -> int | None:
        """Output tokens of the longest choice: all of them when `n` is 1. Usage counts every
        choice, which decode side by side, and the time from first token to last is the
        longest choice's: a stream's tokens are shared out by its choices' content chunks
        (`longest_choice_share`); without them (a whole answer), their mean, rounded up. The
        mean read a stream's TPOT longest / mean times too slow (30 of 40 `n` = 4 answers over
        a TPOT target the deployment met: the feedback audit of 2026-12-07)."""
        tokens = self.completion_tokens
        if tokens is None or self.choices <= 1:
            return tokens
        if self.longest_choice_share is not None:
            return max(1, math.ceil(tokens * self.longest_choice_share))
        return -(-tokens // self.choices)

    @property
    def tpot_s(self) -> float | None:
        """(t_last - t_first) / (output_tokens - 1) (`router.stats.tpot_s`, undefined for one
        output token or less, or all of them in one chunk), over the longest choice's tokens.
        None without the provider's token count: chunks counted for a stream cut before its
        usage read a provider sending 4 tokens a chunk 4 times slower (30 of 30 TPOT events
        bad where the deployment met its target: the feedback audit of 2026-12-07)."""
        tokens = self.tokens_per_choice
        if (tokens is None or self.chunks_counted or self.first_token_at is None
                or self.last_token_at is None):
            return None
        return tpot_s(self.first_token_at, self.last_token_at, tokens)

    def summary(self) -> dict[str, object]:
        """A flat, text-free record for logs."""
        record = {k: v for k, v in asdict(self).items()
                  if k not in ("attempts", "trace", "steps", "captured_input", "captured_output")}
        # `choices` is a content key the log's redaction withholds (an answer's choices): the
        # request's `n` goes under its own name.
        record["n"] = record.pop("choices")
        record.update(sent_status=self.sent_status, ttft_s=self.ttft_s, e2e_s=self.e2e_s,
                      tpot_s=self.tpot_s,
                      attempts=[{"deployment": a.deployment, "kind": a.kind,
                                 "outcome": a.outcome, "error": a.error_class,
                                 "code": a.error.code if a.error is not None else None,
                                 "ttft_s": a.ttft_s,
                                 # each attempt's share of `cost_usd`, for chargeback by
                                 # deployment (`cost_estimated`: the router's estimate)
                                 "cost_usd": a.cost_usd,
                                 "cost_estimated": a.cost_estimated} for a in self.attempts])
        return record


class OutcomeSink(Protocol):
    def record(self, outcome: Outcome) -> None: ...


class LogSink:
    """Writes one structured `request_finished` event per request (the access log) at INFO
    level on `slorouter.access`, when that logger is enabled."""

    def record(self, outcome: Outcome) -> None:
        if access_log.isEnabledFor(logging.INFO):
            access_log.info("request_finished", extra={"event_data": outcome.summary()})


class FanOut:
    def __init__(self, sinks: Sequence[OutcomeSink]) -> None:
        self._sinks = tuple(sinks)

    def record(self, outcome: Outcome) -> None:
        for sink in self._sinks:
            try:
                sink.record(outcome)
            except Exception:  # a broken sink must not break the request path
                log.exception("outcome_sink_failed", extra={"event_data": {
                    "sink": type(sink).__name__}})


def choice_messages(body: bytes) -> list[object] | None:
    """The message of each choice of a chat.completion body, None if it is none."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not isinstance(choices, list):
        return None
    return [c.get("message") for c in choices if isinstance(c, dict)]


def answer_messages(body: bytes) -> str | None:
    """The messages of a chat.completion body as JSON (content capture), None if it is none."""
    messages = choice_messages(body)
    return None if messages is None else orjson.dumps(messages).decode()
