"""uvicorn's HTTP protocol with a request's `Upgrade` header ignored, as HTTP lets a server do
(RFC 9110 §7.8: a server may ignore it and answer in the protocol the request came in).

httptools takes the rest of a connection whose request has `Connection: upgrade` and `Upgrade:
<any protocol>` for that other protocol: the request ends at its head and its body is never
read. uvicorn upgrades to WebSocket only; any other upgrade it logged ("Unsupported upgrade
request.") and left the parser where it stopped. So the app got the request without its body
(`curl --http2 http://...` asks for `h2c` on every request: a 400 `invalid_json`), and the
body's bytes, when they came in a later segment, were parsed as a request of their own: a body
holding a whole request ran as a second request on the connection, behind any proxy that
forwards the header (request smuggling; the fuzzing audit of 2026-12-06). Bytes that came in
the same segment were dropped, with whatever was pipelined after them.

Such a request is parsed again as if it had not asked: its head rebuilt from what was parsed,
less `Upgrade`, `HTTP2-Settings` and those tokens of `Connection`, is fed to a fresh parser with
the bytes that followed it. slorouter serves no WebSocket, so a WebSocket handshake is an
ordinary request too (a 405 or 404 in OpenAI's error shape).
"""

from __future__ import annotations

import httptools

from router.head_with_body import HeadWithBodyProtocol

_UPGRADE_HEADERS = (b"upgrade", b"http2-settings")


class UpgradeIgnoringProtocol(HeadWithBodyProtocol):
    """`HeadWithBodyProtocol` that serves a request asking for an upgrade as if it had not."""

    _stopped = False  # the parser stops after the head being parsed (it asked to upgrade)

    def on_headers_complete(self) -> None:
        if self.parser.should_upgrade():
            self._stopped = True  # parsed again without the upgrade, or refused (`_feed`)
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if not self._stopped:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        # A loop, not a recursion: one read may hold hundreds of pipelined requests that each
        # ask to upgrade (the re-audit: 500 of them in 30 KB ended in a RecursionError).
        rest: memoryview | None = memoryview(data)
        while rest is not None:
            rest = self._feed(rest)

    def _feed(self, data: memoryview) -> memoryview | None:
        """Parse `data`; when a request asking to upgrade stopped the parser, feed a fresh
        parser its head rebuilt without the upgrade and return what followed the head (its
        body, the requests after it) to parse next."""
        try:
            self.parser.feed_data(data)
            return None
        except httptools.HttpParserUpgrade as stopped:
            # A CONNECT (which the parser takes for an upgrade, `Upgrade` or not) is refused:
            # what follows its head is no HTTP to read (its body, arriving later, was parsed
            # as a request of its own).
            if not self._stopped or self.parser.get_method() == b"CONNECT":
                self._refuse_request()
                return None
            at = int(stopped.args[0])
            head = head_without_upgrade(self.parser.get_method(), self.url,
                                        self.parser.get_http_version(), self.headers)
        except httptools.HttpParserError:
            self._refuse_request()
            return None
        self._stopped = False
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's
        try:
            self.parser.feed_data(head)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # nothing to take back
            self._refuse_request()
            return None
        return data[at:]

    def _refuse_request(self) -> None:
        """A 400 in OpenAI's shape, and the connection closes: a CONNECT, or bytes HTTP does
        not allow (what follows on the connection cannot be read)."""
        self._stopped = False
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)


def head_without_upgrade(method: bytes, target: bytes, version: str,
                         headers: list[tuple[bytes, bytes]]) -> bytes:
    """A request head from its parsed parts (header names lower-cased, as uvicorn keeps them),
    without `Upgrade`, `HTTP2-Settings` and their tokens in `Connection`."""
    lines = [method + b" " + target + b" HTTP/" + version.encode("ascii") + b"\r\n"]
    for name, value in headers:
        if name in _UPGRADE_HEADERS:
            continue
        if name == b"connection":
            tokens = [t.strip() for t in value.split(b",")]
            kept = [t for t in tokens if t and t.lower() not in _UPGRADE_HEADERS]
            if not kept:
                continue
            value = b", ".join(kept)
        lines.append(name + b": " + value + b"\r\n")
    return b"".join(lines) + b"\r\n"
