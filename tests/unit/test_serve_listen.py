"""`slorouter serve` binds its sockets before the app starts, as asyncio's `create_server`
would have bound them for uvicorn: one socket per address the host resolves to, IPv6 sockets
IPv6 only, and with port 0 one port for all of them."""

from __future__ import annotations

import socket

import pytest

from router.serve_cli import _listen


def _close(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def test_an_address_gets_one_socket_on_it() -> None:
    sockets = _listen("127.0.0.1", 0)
    try:
        assert [s.family for s in sockets] == [socket.AF_INET]
        assert sockets[0].getsockname()[0] == "127.0.0.1"
        assert sockets[0].getsockname()[1] > 0
    finally:
        _close(sockets)


def test_a_host_of_several_addresses_is_bound_on_each_with_one_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name resolving to 127.0.0.1 and ::1 (`localhost` where /etc/hosts lists both; this
    machine's lists only 127.0.0.1, so the resolver answers for the name here, the sockets are
    real): each address is bound, the IPv6 one IPv6 only, and port 0 is one port for both."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    resolve = socket.getaddrinfo

    def both(host: str, port: int, *args: object, **kwargs: object) -> list[object]:
        assert host == "dual.test"
        return [*resolve("127.0.0.1", port, socket.AF_INET, socket.SOCK_STREAM),
                *resolve("::1", port, socket.AF_INET6, socket.SOCK_STREAM)]

    monkeypatch.setattr(socket, "getaddrinfo", both)
    sockets = _listen("dual.test", 0)
    try:
        assert [s.family for s in sockets] == [socket.AF_INET, socket.AF_INET6]
        assert len({s.getsockname()[1] for s in sockets}) == 1
        assert sockets[1].getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
    finally:
        _close(sockets)


def test_a_port_in_use_fails_and_leaves_nothing_bound() -> None:
    taken = _listen("127.0.0.1", 0)
    taken[0].listen()
    port = taken[0].getsockname()[1]
    try:
        with pytest.raises(OSError):
            _listen("127.0.0.1", port)
    finally:
        _close(taken)
    again = _listen("127.0.0.1", port)  # nothing of the failed attempt holds the port
    _close(again)
    assert again
