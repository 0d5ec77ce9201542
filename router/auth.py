"""Authentication: `Authorization: Bearer <key>` → the caller's tenant and scopes.

Keys are looked up by their SHA-256 digest, so the configuration may hold digests instead of
secrets. With no keys configured every caller is the `default` tenant (the service then only
binds to loopback; see `router.serve_cli`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from router.errors import AuthenticationError
from router.runtime_config import Principal

ANONYMOUS = Principal(tenant="default", scopes=())


def authenticate(authorization: str | None, principals: Mapping[str, Principal]) -> Principal:
    if not principals:
        return ANONYMOUS
    if not authorization:
        raise AuthenticationError("missing Authorization header: send 'Bearer <key>'",
                                  code="missing_api_key")
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise AuthenticationError("Authorization must be 'Bearer <key>'", code="invalid_api_key")
    principal = principals.get(hashlib.sha256(key.strip().encode()).hexdigest())
    if principal is None:
        raise AuthenticationError("invalid API key", code="invalid_api_key")
    return principal
