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
import re
from collections.abc import Callable, Container, Iterable, Mapping
from functools import partial

from router.errors import AuthenticationError, PermissionDeniedError
from router.runtime_config import Principal, key_digest

ANONYMOUS = Principal(tenant="default", scopes=())
# The scope of an operator's key: it may read what aggregates every tenant's requests.
OPERATOR_SCOPE = "slorouter:operator"
# The characters of a bearer token (RFC 6750's b64token) and its `=` padding: the parts of a
# client's string a key pasted into it would be one of (`Bearer KEY`, `acme=KEY`, `"KEY"`).
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9._~+/\-]+=*")
# A presented credential shorter than this is not looked for in other strings (it would match
# common words), as the log redaction leaves known secrets under 6 characters alone.
_MIN_SEARCHED_CHARS = 6


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


def presented_credentials(authorization: Iterable[str]) -> tuple[str, ...]:
    """What a request's `Authorization` lines present as its credential, valid or not: each
    line's last word (`Bearer KEY` gives KEY; a bare KEY, which `authenticate` refuses, is a
    secret all the same)."""
    found = []
    for value in authorization:
        words = value.split(None, 1)
        if words and words[-1].strip():
            found.append(words[-1].strip())
    return tuple(found)


def holds_key(text: str, presented: Iterable[str], digests: Container[str]) -> bool:
    """Whether `text`, a string a client chose that logs or spans record (its `x-request-id`,
    its `tracestate`), holds an API key: the request's own credential (`presented`) anywhere in
    it, or a configured client key (`digests`: SHA-256 hex, as `principals` holds them, so a
    `key_sha256` key too) as the whole of it or as one of its token-like parts. A configured
    key glued to other text by key characters (`req-KEY`) is found only when it is the
    request's own: finding it in any substring would cost a hash per substring."""
    if any(len(key) >= _MIN_SEARCHED_CHARS and key in text for key in presented):
        return True
    if not digests:
        return False
    return any(key_digest(part) in digests for part in {text, *_TOKEN_LIKE.findall(text)})


def key_finder(authorization: Iterable[str],
               principals: Mapping[str, Principal]) -> Callable[[str], bool]:
    """`holds_key` for one request: its presented credentials and the configured keys."""
    return partial(holds_key, presented=presented_credentials(authorization),
                   digests=principals.keys())
