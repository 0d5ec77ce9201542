"""A router without API keys answers local programs only, never a web page.

Without `api_keys` the router binds to loopback only, and loopback is its only protection: any
process on the machine may call it, with the operator's provider keys. A web page open in the
user's browser is not such a process, yet it can reach loopback two ways: a cross-origin
"simple" request (a POST with a text/plain body: no preflight, and the router reads any
content type as JSON) sends a completion it cannot read, and DNS rebinding (a name of the
page's that resolves to 127.0.0.1) sends one and reads the answer. Browsers mark both: every
cross-origin request carries `Origin`, and a rebound one carries the page's own name as `Host`.
So a keyless router refuses any request with an `Origin` header and any whose `Host` is not a
loopback name or address. Local programs (SDKs, curl) send neither. With keys configured, a
page would need a key, and these checks do not apply.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from router.errors import PermissionDeniedError

_LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


def browser_refusal(headers: Iterable[tuple[bytes, bytes]]) -> PermissionDeniedError | None:
    """The 403 for a request a keyless router must not serve (`Origin` sent, or a `Host` that is
    not loopback), else None. `headers` are the ASGI scope's raw (lower-case) headers."""
    for name, value in headers:
        if name == b"origin":
            return PermissionDeniedError(
                "this router has no api_keys and serves local programs only; a request from a "
                "web page (it carries an Origin header) is refused: configure api_keys to serve "
                "browsers", code="browser_request_refused")
        if name == b"host" and not loopback_host(value.decode("latin-1")):
            return PermissionDeniedError(
                "this router has no api_keys and answers requests addressed to a loopback name "
                "or address only (Host: localhost, 127.0.0.1, [::1]); configure api_keys to "
                "serve other names", code="browser_request_refused")
    return None


def loopback_host(host: str) -> bool:
    """Whether a `Host` header (with or without its port) names this machine: `localhost` (and
    names under it, which resolvers keep on loopback), or an address that reaches it: loopback
    or unspecified (`0.0.0.0`, which Linux connects to loopback), in any spelling `inet_aton`
    takes (`127.1`) or as an IPv4-mapped IPv6 address. DNS rebinding needs a name, never an
    address, and a page addressing one of these is cross-origin anyway (its `Origin` is
    refused)."""
    name = host.strip().lower()
    if name.startswith("["):  # an IPv6 literal: [::1]:8080
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.removesuffix(".")
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    address = _address(name)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and (address.is_loopback or address.is_unspecified)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    try:  # IPv4's other spellings (127.1, 2130706433), which clients resolve as addresses
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None
