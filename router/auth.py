"""Authentication: `Authorization: Bearer <key>` → the caller's tenant and scopes.

Keys are looked up by their SHA-256 digest, so the configuration may hold digests instead of
secrets. With no keys configured every caller is the `default` tenant (the service then only
binds to loopback; see `router.serve_cli`).

Scopes are the configuration's own words (`docs:read`), which the router reads only as part of
cache and idempotency keys, with one exception: `OPERATOR_SCOPE` lets a key read what spans
every tenant (`GET /v1/experiments`), `require_scope`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from router.errors import AuthenticationError, PermissionDeniedError
from router.runtime_config import Principal

ANONYMOUS = Principal(tenant="default", scopes=())
# The scope of an operator's key: it may read what aggregates every tenant's requests.
OPERATOR_SCOPE = "slorouter:operator"


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


def require_scope(principal: Principal, scope: str, what: str,
                  principals: Mapping[str, Principal]) -> None:
    """A 403 (`insufficient_permissions`) unless the caller's key has `scope`; with no keys
    configured (loopback only) every caller has every scope. `what` names the endpoint."""
    if principals and scope not in principal.scopes:
        raise PermissionDeniedError(f"{what} needs a key with the {scope!r} scope",
                                    code="insufficient_permissions")
