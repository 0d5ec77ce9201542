"""Idempotency keys: at most one execution per (tenant, `Idempotency-Key`).

`IdempotencyStore` has two implementations: `MemoryIdempotencyStore` (one replica) and
`RedisIdempotencyStore` (shared across replicas). `run_once` composes claim, execute and
store/release for a whole response; `body_fingerprint` and `validate_key` prepare the inputs.
"""

from router.idempotency.guard import OnceResult, run_once
from router.idempotency.memory import MemoryIdempotencyStore
from router.idempotency.redis_store import RedisIdempotencyStore
from router.idempotency.renewal import LEASE_S, keep_renewed
from router.idempotency.types import (
    IDEMPOTENCY_HEADER,
    Claim,
    IdempotencyStore,
    Lease,
    Replay,
    StoredResponse,
    body_fingerprint,
    error_response,
    json_fingerprint,
    scope_of,
    validate_key,
    won_too_late,
)

__all__ = [
    "IDEMPOTENCY_HEADER",
    "LEASE_S",
    "Claim",
    "IdempotencyStore",
    "Lease",
    "MemoryIdempotencyStore",
    "OnceResult",
    "RedisIdempotencyStore",
    "Replay",
    "StoredResponse",
    "body_fingerprint",
    "error_response",
    "json_fingerprint",
    "keep_renewed",
    "run_once",
    "scope_of",
    "validate_key",
    "won_too_late",
]
