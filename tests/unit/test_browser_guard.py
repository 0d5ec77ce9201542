"""A router without API keys refuses web pages: any `Origin`, any `Host` that is not loopback."""

from __future__ import annotations

import pytest

from router.api.browser_guard import browser_refusal, loopback_host


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST", "127.0.0.1",
                                  "127.0.0.1:8080", "127.3.4.5:1", "[::1]", "[::1]:8080", "::1",
                                  "app.localhost:8080", "localhost.", "127.0.0.1.:8080",
                                  "0.0.0.0:8080", "127.1", "2130706433",
                                  "[::ffff:127.0.0.1]:8080", "[::]:8080"])
def test_loopback_names_and_addresses_are_served(host: str) -> None:
    assert loopback_host(host)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "10.0.0.1:8080",
                                  "localhost.evil.example", "[2001:db8::1]:80", "evil.example.",
                                  "10.1", "[::ffff:10.0.0.1]", ""])
def test_other_hosts_are_not(host: str) -> None:
    assert not loopback_host(host)


def test_a_page_s_request_is_refused_and_a_program_s_is_not() -> None:
    program = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]
    assert browser_refusal(program) is None
    assert browser_refusal([]) is None  # HTTP/1.0 without a Host
    cross_origin = [*program, (b"origin", b"http://evil.example")]
    rebound = [(b"host", b"evil.example:8080")]
    for headers in (cross_origin, rebound, [(b"origin", b"null"), (b"host", b"localhost")]):
        refused = browser_refusal(headers)
        assert refused is not None and refused.status_code == 403
        assert refused.code == "browser_request_refused"
