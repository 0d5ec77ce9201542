"""The seam between the simulator's engine and a wire format (OpenAI or Anthropic).

A `Wire` parses a request body into a `SimRequest` and renders plans and errors as bytes; a
`StreamRenderer` renders one streamed answer as head, chunks and tail. The engine only sees
these protocols, so a third wire format is one more module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from router.providers.simulator.plan import Plan
from router.providers.simulator.request import SimRequest


@dataclass(frozen=True)
class ResponseMeta:
    """Identity of one response: random id (hex), creation time (epoch s), echoed model name."""

    id_hex: str
    created: int
    model: str


@dataclass(frozen=True)
class ErrorKind:
    """A failure to render: HTTP status, a stable code and a human message."""

    status: int
    code: str
    message: str


class WireError(ValueError):
    """A request body that does not parse or validate (rendered as a 400 by the wire)."""


class StreamRenderer(Protocol):
    """Bytes of one streamed answer, in order: `head`, `chunk` for each chunk of each choice
    (`index` counts a choice's chunks; a wire without `n` sees choice 0 only), `tail`."""

    def head(self) -> bytes: ...

    def chunk(self, index: int, text: str, choice: int = 0) -> bytes: ...

    def tail(self) -> bytes: ...


class Wire(Protocol):
    """One wire format."""

    def refuse_headers(self, headers: Mapping[str, str]) -> ErrorKind | None:
        """The error the wire's provider answers these request headers with, if any."""
        ...

    def parse(self, body: bytes) -> SimRequest: ...

    def status(self, kind: ErrorKind) -> int:
        """The HTTP status the wire's provider answers `kind` with."""
        ...

    def error(self, kind: ErrorKind) -> bytes: ...

    def complete(self, plan: Plan, meta: ResponseMeta) -> bytes: ...

    def stream(self, plan: Plan, meta: ResponseMeta, include_usage: bool) -> StreamRenderer: ...
