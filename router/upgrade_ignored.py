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

    _asked_upgrade = False  # the request being parsed asked: it is parsed again without

    def on_headers_complete(self) -> None:
        # The parser takes a CONNECT for an upgrade too, `Upgrade` or not: that one is
        # uvicorn's to refuse (a 400), as before; parsed again it would upgrade again.
        if self.parser.should_upgrade() and self.parser.get_method() != b"CONNECT":
            self._asked_upgrade = True  # the parser stops after this head: parse it again
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if not self._asked_upgrade:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        self._feed(data)

    def _feed(self, data: bytes, rebuilt_head: int = 0) -> None:
        """Parse `data`; `rebuilt_head`: the length of the head it starts with when that head
        was rebuilt here (an upgrade stopping within it again is refused, never parsed again:
        a head that kept upgrading would recurse without end)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as stopped:
            at = int(stopped.args[0])
            if not self._asked_upgrade or at <= rebuilt_head:
                self._refuse_upgrade()
            else:
                self._parse_again(data[at:])
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)

    def _parse_again(self, rest: bytes) -> None:
        head = head_without_upgrade(self.parser.get_method(), self.url,
                                    self.parser.get_http_version(), self.headers)
        self._asked_upgrade = False
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's
        self._feed(head + rest, len(head))

    def _refuse_upgrade(self) -> None:
        """A CONNECT (uvicorn has answered it, or has it in hand), or an upgrade this protocol
        could not take back: the parser has stopped, so nothing more on the connection can be
        read. A 400 when no answer is under way, and the connection closes."""
        self._asked_upgrade = False
        if self.cycle is None or self.cycle.response_complete:
            self.send_400_response("Invalid HTTP request received.")


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
