"""Open-loop load: Poisson arrivals at a fixed rate, independent of responses.

Arrival times are drawn up front from a seeded generator, so every target sees the same
schedule. Each request records its start, its TTFT (first content chunk, or the whole
response when not streaming), its E2E and its status. Counts and duration are bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np
import orjson


@dataclass(frozen=True)
class Sample:
    started: float
    ttft_s: float | None
    e2e_s: float | None
    status: int
    error: str | None = None


@dataclass
class RunResult:
    target: str
    rate: float
    duration_s: float
    samples: list[Sample] = field(default_factory=list)

    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200 and s.error is None]

    def percentiles_ms(self, metric: str, qs: Sequence[float] = (50, 99)) -> list[float]:
        values = [getattr(s, metric) for s in self.ok() if getattr(s, metric) is not None]
        if not values:
            return [float("nan")] * len(qs)
        return [float(v) * 1e3 for v in np.percentile(values, qs)]

    @property
    def achieved_rate(self) -> float:
        return len(self.samples) / self.duration_s if self.duration_s else 0.0

    def errors(self) -> int:
        return len(self.samples) - len(self.ok())


def poisson_schedule(rate: float, duration_s: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = int(rate * duration_s * 1.5) + 10
    times = np.cumsum(rng.exponential(1.0 / rate, size=count))
    return times[times < duration_s]


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str],
               stream: bool) -> Sample:
    started = time.perf_counter()
    ttft = None
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if not stream:
                await response.read()
                elapsed = time.perf_counter() - started
                return Sample(started, elapsed, elapsed, response.status)
            async for line in response.content:
                if ttft is None and line.startswith(b"data: {") and b'"content":"' in line:
                    ttft = time.perf_counter() - started
            return Sample(started, ttft, time.perf_counter() - started, response.status)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return Sample(started, None, None, 0, type(exc).__name__)


async def run_open_loop(target: str, url: str, payload: dict[str, object], rate: float,
                        duration_s: float, seed: int = 7, api_key: str | None = None,
                        timeout_s: float = 30.0) -> RunResult:
    """Send `payload` to `url` at Poisson times; wait for every request to finish."""
    stream = bool(payload.get("stream"))
    body = orjson.dumps(payload)
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    schedule = poisson_schedule(rate, duration_s, seed)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        tasks = []
        for at in schedule:
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(session, url, body, headers, stream)))
        samples = await asyncio.gather(*tasks)
    return RunResult(target, rate, duration_s, list(samples))
