"""One measured upstream attempt (or one answered request), and the small formulas around it.

`Observation` is what the execution layer hands to a `StatsStore` (and to the SLO tracker) in its
`finally` block. TPOT follows DESIGN.md: `(t_last_token - t_first_token) / (output_tokens - 1)`,
undefined when `output_tokens <= 1`. Times `t` are wall-clock epoch seconds so that replicas can
merge what they learn. The prompt-length buckets used as a statistics key also live here.
Estimators and storage do not.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Final

from policies.labels import Task

# Upper-exclusive edges of the prompt-length buckets, in prompt tokens:
# [0, 512), [512, 2048), [2048, 8192), [8192, 32768), [32768, inf).
PROMPT_BUCKET_EDGES: Final[tuple[int, ...]] = (512, 2048, 8192, 32768)


def prompt_bucket(prompt_tokens: int) -> int:
    """The index of the prompt-length bucket that holds `prompt_tokens`."""
    return bisect.bisect_right(PROMPT_BUCKET_EDGES, prompt_tokens)


def prompt_bucket_label(bucket: int) -> str:
    """A bucket as a range of prompt tokens, for people: "0-511", ..., "32768+"."""
    low = PROMPT_BUCKET_EDGES[bucket - 1] if bucket > 0 else 0
    if bucket >= len(PROMPT_BUCKET_EDGES):
        return f"{low}+"
    return f"{low}-{PROMPT_BUCKET_EDGES[bucket] - 1}"


def tpot_s(t_first_token: float, t_last_token: float, output_tokens: int) -> float | None:
    """Time per output token, or None when it is undefined: one output token or fewer, or
    every token in one chunk (no time between first and last: not a TPOT of 0)."""
    if output_tokens <= 1 or t_last_token <= t_first_token:
        return None
    return (t_last_token - t_first_token) / (output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Observation:
    """What one upstream attempt (or one answered request) measured.

    `ttft_s` is None when no content chunk arrived (a failure before the first token);
    `tpot_s` is None when undefined; `error` names the error class of a failed attempt
    (e.g. "ProviderTimeout") and is None on success; `cached` marks an answer served from the
    cache, which is recorded apart and never feeds the upstream latency estimates. `streamed`
    is False for a non-streamed answer: its first content is the whole answer, so its `ttft_s`
    is its generation time, and the estimators take its `e2e_s` instead (`estimators.py`).
    `whole` is False for an answer that did not run to its end (a stream its client left): its
    TTFT and TPOT stand, but its length and E2E are only where the client stopped reading.
    """

    deployment: str
    task: Task
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    queue_s: float
    error: str | None
    cached: bool
    t: float
    streamed: bool = True
    whole: bool = True

    @property
    def ok(self) -> bool:
        """True when the attempt succeeded."""
        return self.error is None

    @property
    def bucket(self) -> int:
        """The prompt-length bucket of this observation."""
        return prompt_bucket(self.prompt_tokens)

    @classmethod
    def from_timings(
        cls,
        *,
        deployment: str,
        task: Task,
        prompt_tokens: int,
        output_tokens: int,
        t_start: float,
        t_first_token: float | None,
        t_last_token: float | None,
        t_end: float,
        queue_s: float = 0.0,
        error: str | None = None,
        cached: bool = False,
        streamed: bool = True,
        whole: bool = True,
    ) -> Observation:
        """Build an observation from raw timestamps (all on the same wall clock)."""
        ttft = None if t_first_token is None else max(t_first_token - t_start, 0.0)
        tpot = None
        if t_first_token is not None and t_last_token is not None:
            tpot = tpot_s(t_first_token, t_last_token, output_tokens)
        return cls(
            deployment=deployment, task=task, prompt_tokens=prompt_tokens,
            output_tokens=output_tokens, ttft_s=ttft, tpot_s=tpot,
            e2e_s=max(t_end - t_start, 0.0), queue_s=queue_s, error=error, cached=cached,
            t=t_end, streamed=streamed, whole=whole,
        )
