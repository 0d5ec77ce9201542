"""A cheap deterministic random stream keyed by bytes (blake2b in counter mode).

`random.Random(seed)` costs about 25 µs to seed, more than the rest of a simulated request;
`HashRandom(key)` costs nothing to create and about 1 µs per 64 bytes drawn. It offers the
subset of `random.Random` the content generator uses (`random`, `gauss`, `randint`, `choice`,
`uniform`) plus `byte_stream` for picking many words at once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
_BLOCK = 64


class HashRandom:
    """Numbers drawn from `blake2b(key || counter)` blocks; same key, same numbers."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._counter = 0
        self._buffer = b""
        self._position = 0

    def _block(self) -> bytes:
        counter = self._counter.to_bytes(8, "big")
        self._counter += 1
        return hashlib.blake2b(self._key + counter, digest_size=_BLOCK).digest()

    def byte_stream(self, count: int) -> bytes:
        """`count` fresh pseudo-random bytes."""
        blocks = [self._block() for _ in range(-(-count // _BLOCK))]
        return b"".join(blocks)[:count]

    def _next64(self) -> int:
        if self._position + 8 > len(self._buffer):
            self._buffer, self._position = self._block(), 0
        value = int.from_bytes(self._buffer[self._position : self._position + 8], "big")
        self._position += 8
        return value

    def random(self) -> float:
        """A float in [0, 1) with 53 random bits."""
        return (self._next64() >> 11) * 2.0**-53

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        """A normal draw (Box–Muller)."""
        u1 = 1.0 - self.random()  # in (0, 1]
        u2 = self.random()
        return mu + sigma * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def randint(self, low: int, high: int) -> int:
        """An integer in [low, high], both included."""
        return low + int(self.random() * (high - low + 1))

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def choice(self, items: Sequence[T]) -> T:
        return items[int(self.random() * len(items))]
