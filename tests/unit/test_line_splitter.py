"""SSE line framing over body chunks (`http1.LineSplitter`), however the body is cut."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from router.providers.http1 import LineSplitter

ENDS = (b"\n", b"\r\n", b"\r")
line_text = st.binary(max_size=40).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b""))


def _fed(body: bytes, cuts: list[int]) -> list[bytes]:
    splitter = LineSplitter()
    out: list[bytes] = []
    bounds = [0, *sorted(cut % (len(body) + 1) for cut in cuts), len(body)]
    for start, end in pairwise(bounds):
        out += splitter.feed(body[start:end])
    return [*out, splitter.rest()]


@given(st.lists(st.tuples(line_text, st.sampled_from(ENDS)), max_size=12), line_text,
       st.lists(st.integers(min_value=0), max_size=30))
def test_any_cut_of_a_body_gives_its_lines(lines: list[tuple[bytes, bytes]], last: bytes,
                                           cuts: list[int]) -> None:
    """Each line comes out once, whole and without its end, with the unfinished last one left;
    the only difference a cut makes is an empty line where it split a CRLF (empty lines carry
    nothing in SSE)."""
    body = b"".join(text + end for text, end in lines) + last
    got = _fed(body, cuts)
    assert [line for line in got[:-1] if line] == [text for text, _ in lines if text]
    assert got[-1] == last
    assert len(got) - 1 <= len(lines) + len(cuts)  # at most one empty line per cut


def test_a_line_over_many_chunks_is_joined_once_it_ends() -> None:
    splitter = LineSplitter()
    piece = b'{"x": "' + b"a" * 1000
    assert splitter.feed(b"data: ") == []
    for _ in range(100):
        assert splitter.feed(piece) == []
    assert splitter.feed(b'"}\n\ndata: [DO') == [b"data: " + piece * 100 + b'"}', b""]
    assert splitter.rest() == b"data: [DO"
    assert splitter.feed(b"NE]\r\n") == [b"data: [DONE]"]
    assert splitter.rest() == b""
