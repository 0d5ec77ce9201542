"""The simulated KV prefix cache of one model on one simulator process (one deployment).

An LRU of prompt-prefix hashes with a time-to-live and a capacity (both from the profile, read
at each call so the control API can change them). A request looks up its prefix chain (see
`request.prefix_chain`): the longest live prefix of at least `min_tokens` tokens is a hit. Then
all of the request's prefixes are recorded. The clock is injected.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence


class PrefixCache:
    """Recently seen prompt prefixes with their expiry times."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._expiry: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def clear(self) -> None:
        self._expiry.clear()

    def _live(self, key: bytes, now: float) -> bool:
        expiry = self._expiry.get(key)
        if expiry is None:
            return False
        if expiry <= now:
            del self._expiry[key]
            return False
        return True

    def lookup_and_record(
        self,
        chain: Sequence[tuple[bytes, int]],
        ttl_s: float,
        capacity: int,
        min_tokens: int,
    ) -> int:
        """Tokens of the longest cached prefix (0 on a miss); then remember every prefix."""
        now = self._clock()
        cached = 0
        for key, tokens in reversed(chain):
            if tokens >= min_tokens and self._live(key, now):
                cached = tokens
                break
        if capacity <= 0 or ttl_s <= 0:
            return cached
        for key, _ in chain:
            self._expiry[key] = now + ttl_s
            self._expiry.move_to_end(key)
        while len(self._expiry) > capacity:
            self._expiry.popitem(last=False)
        return cached
