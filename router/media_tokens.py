"""How many prompt tokens a media content part costs, from what the part itself says.

An inline part (a `data:` URL or base64 `data`) is sized by reading only its header: an image's
width and height, a recording's length, a PDF's pages. A part that points elsewhere (an image
URL, a `file_id`) cannot be sized without fetching it, which the router never does; it is
priced as the largest image the rules below give. Each rule errs high, as the text estimate
does (`router.pipeline.estimate_prompt_tokens`), without becoming a worst case no real part
reaches, since the same estimate decides whether a prompt fits a context window.

- Images: the larger of OpenAI's tile rule (85 tokens at `detail: low`; otherwise the image
  fitted into 2048x2048, its short side brought down to 768, 85 plus 170 per 512-px tile) and
  Anthropic's pixel rule (the long side at most 1568 px, width x height / 750, at most 1568).
- Audio: 10 tokens a second (OpenAI's per-minute audio prices come to 600 input tokens a
  minute), the length read from a WAV header or an MP3 frame's bit rate.
- PDF files: each page is read as its text and a picture of the page by both providers;
  `TOKENS_PER_PDF_PAGE` for the two.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import zlib
from collections.abc import Mapping
from typing import Any

# OpenAI's tile rule.
_LOW_DETAIL_TOKENS = 85
_TILE_TOKENS = 170
_TILE_PX = 512
_FIT_PX = 2048
_SHORT_SIDE_PX = 768
# Anthropic's pixel rule.
_ANTHROPIC_LONG_SIDE_PX = 1568
_ANTHROPIC_PX_PER_TOKEN = 750
_ANTHROPIC_MOST_TOKENS = 1568
# What a part nothing can be read from is priced at: the largest image either rule gives.
UNSIZED_PART_TOKENS = _ANTHROPIC_MOST_TOKENS

AUDIO_TOKENS_PER_SECOND = 10
_LEAST_AUDIO_BYTES_PER_S = 1_000
_MOST_AUDIO_BYTES_PER_S = 1_536_000
# A recording whose header says nothing is taken to be this dense (bytes a second): 32 kbit/s,
# speech in a low-rate MP3; a denser one is counted as longer than it is.
_UNREAD_AUDIO_BYTES_PER_S = 4_000
# A page's picture (about OpenAI's 765 for a page in high detail, Anthropic's 1568 at most) and
# its text (a dense page of about 600 words).
TOKENS_PER_PDF_PAGE = 2_000
# A PDF whose pages cannot be counted (encrypted, its page objects compressed in a way not read
# here) is taken to hold one page for every this many bytes.
_PDF_BYTES_PER_UNCOUNTED_PAGE = 50_000

# How much of a JPEG is decoded to find its frame when the first 64 KB did not hold it (past a
# long EXIF block or colour profile); a frame past it leaves the image unsized.
_MOST_JPEG_HEAD = 1024 * 1024
# Enough of a part's start for any header read here (a JPEG's size can follow a long EXIF block,
# an MP3's first frame a long ID3 tag: those read further).
_HEAD_BYTES = 64 * 1024


MEDIA_PARTS = frozenset({"image_url", "input_audio", "file"})


def media_part_tokens(kind: str, payload: Mapping[str, Any] | None) -> int:
    """Prompt tokens of one `image_url`, `input_audio` or `file` content part (`kind`, its
    payload the part's field of that name)."""
    payload = payload or {}
    if kind == "image_url":
        return _image_part_tokens(payload)
    if kind == "input_audio":
        return _audio_part_tokens(payload)
    if kind == "file":
        return _file_part_tokens(payload)
    return UNSIZED_PART_TOKENS


def whole_decoded_chars(kind: str, payload: Mapping[str, Any] | None) -> int:
    """Base64 characters `media_part_tokens` decodes and scans whole for the part (an inline
    file's: a PDF's pages can be anywhere in it; an image or a recording is read by its
    header). About 4 ns a character: a 10 MB PDF takes some 50 ms."""
    if kind != "file" or not payload:
        return 0
    data = payload.get("file_data")
    return len(data) if isinstance(data, str) else 0


def image_tokens(width: int, height: int, detail: str | None) -> int:
    """Tokens of a `width` x `height` image: the larger of the two providers' rules."""
    return max(openai_image_tokens(width, height, detail), anthropic_image_tokens(width, height))


def openai_image_tokens(width: int, height: int, detail: str | None) -> int:
    """OpenAI's tile rule (`detail` `low`, `high` or `auto`, which is counted as high)."""
    if detail == "low":
        return _LOW_DETAIL_TOKENS
    w, h = float(width), float(height)
    if max(w, h) > _FIT_PX:
        scale = _FIT_PX / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > _SHORT_SIDE_PX:
        scale = _SHORT_SIDE_PX / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / _TILE_PX) * math.ceil(h / _TILE_PX)
    return _LOW_DETAIL_TOKENS + _TILE_TOKENS * tiles


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's pixel rule: the long side brought down to 1568 px, then a token per 750 px,
    at most 1568 (larger images are scaled down to that)."""
    w, h = float(width), float(height)
    if max(w, h) > _ANTHROPIC_LONG_SIDE_PX:
        scale = _ANTHROPIC_LONG_SIDE_PX / max(w, h)
        w, h = w * scale, h * scale
    return min(math.ceil(w * h / _ANTHROPIC_PX_PER_TOKEN), _ANTHROPIC_MOST_TOKENS)


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the start of a PNG, GIF, JPEG or WebP file, if it says."""
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(head)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    return None


# JPEG markers whose segment holds the frame's size (start of frame, every coding but the
# DHT/JPG/DAC markers that share the range).
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset(range(0xD0, 0xDA)) | {0x01}


# The most segments of a JPEG walked before its frame (a real file has a dozen or so): a file
# of tiny segments, or of fill bytes walked one at a time, held the event loop for a quarter
# of a second (the re-audit).
_MOST_JPEG_SEGMENTS = 512


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    for _ in range(_MOST_JPEG_SEGMENTS):
        if at + 4 > len(data) or data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill bytes before the marker: skipped at once
            at = len(data) - len(data[at:].lstrip(b"\xff")) - 1
            continue
        if marker in _JPEG_STANDALONE:
            at += 2
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if marker in _JPEG_FRAMES:
            if at + 9 > len(data):
                return None
            return (int.from_bytes(data[at + 7:at + 9], "big"),
                    int.from_bytes(data[at + 5:at + 7], "big"))
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        return (int.from_bytes(data[26:28], "little") & 0x3FFF,
                int.from_bytes(data[28:30], "little") & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8X" and len(data) >= 30:
        return (1 + int.from_bytes(data[24:27], "little"),
                1 + int.from_bytes(data[27:30], "little"))
    return None


def audio_seconds(head: bytes, audio_format: str | None, size: int | None = None) -> float:
    """How long a recording of `size` bytes (default: `head`'s) that starts with `head` plays:
    its WAV header's byte rate, or its first MP3 frame's bit rate, else a low rate that counts
    it long."""
    data = head
    rate = None
    if audio_format == "wav" or data[:4] == b"RIFF":
        rate = _wav_byte_rate(data)
    if rate is None and (audio_format == "mp3" or data[:3] == b"ID3" or data[:1] == b"\xff"):
        rate = _mp3_byte_rate(data)
    return (len(data) if size is None else size) / (rate or _UNREAD_AUDIO_BYTES_PER_S)


def _wav_byte_rate(data: bytes) -> int | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at = 12
    while at + 8 <= min(len(data), _HEAD_BYTES):
        size = int.from_bytes(data[at + 4:at + 8], "little")
        if data[at:at + 4] == b"fmt " and at + 20 <= len(data):
            rate = int.from_bytes(data[at + 16:at + 20], "little")
            # The header's word, which decoders ignore: held to what audio can be (8 kHz
            # 8-bit mono to 192 kHz 32-bit stereo), or a caller names 4 GB/s and a long
            # recording slips under a cost ceiling as one token (the re-audit).
            return min(max(rate, _LEAST_AUDIO_BYTES_PER_S), _MOST_AUDIO_BYTES_PER_S) if rate \
                else None
        at += 8 + size + (size & 1)
    return None


# kbit/s by the frame header's bit-rate index: MPEG-1 layer III, then MPEG-2 and 2.5 layer III.
_MP3_KBPS = {3: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
             2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
             0: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)}


def _mp3_byte_rate(data: bytes) -> int | None:
    at = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        size = 0
        for byte in data[6:10]:  # four 7-bit bytes
            size = (size << 7) | (byte & 0x7F)
        at = 10 + size + (10 if data[5] & 0x10 else 0)
    frame = data[at:at + 4]
    if len(frame) < 4 or frame[0] != 0xFF or frame[1] & 0xE0 != 0xE0:
        return None
    version, layer, index = (frame[1] >> 3) & 0x3, (frame[1] >> 1) & 0x3, frame[2] >> 4
    if layer != 1 or version not in _MP3_KBPS or not 0 < index < 15:  # layer III only
        return None
    return _MP3_KBPS[version][index] * 1000 // 8


_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm\b")
# How far around an object stream's `/Type` its dictionary's `/Filter` and its `stream` keyword
# are looked for, and how many object streams of one file are read (a real file has dozens): a
# search to the end of the file for each of 300,000 `/Type /ObjStm` with no stream after them
# was quadratic.
_DICTIONARY_SPAN = 1024
_MOST_OBJECT_STREAMS = 1000
# The most the compressed object streams of one file are inflated to, together, when looking
# for pages in them.
_MOST_INFLATED = 8 * 1024 * 1024


def pdf_pages(data: bytes) -> int:
    """Pages of a PDF: its page objects, those packed in compressed object streams too (a page
    rewritten by an incremental update counts twice, erring high); when none is found, one page
    for every 50 KB."""
    pages = len(_PAGE_OBJECT.findall(data))
    budget = _MOST_INFLATED  # over every object stream together: a file of many streams that
    # each inflate a thousandfold must not hold the request (and the event loop) for seconds
    for number, found in enumerate(_OBJECT_STREAM.finditer(data)):
        if budget <= 0 or number >= _MOST_OBJECT_STREAMS:
            break
        keyword = data.find(b"stream", found.end(), found.end() + _DICTIONARY_SPAN)
        if keyword < 0 or b"/FlateDecode" not in data[
                max(0, found.start() - _DICTIONARY_SPAN):keyword]:
            continue
        start = keyword + len(b"stream")
        start += 2 if data[start:start + 2] == b"\r\n" else 1
        inflater = zlib.decompressobj()
        try:
            inflated = inflater.decompress(memoryview(data)[start:start + budget], budget)
        except zlib.error:
            continue
        budget -= len(inflated)
        pages += len(_PAGE_OBJECT.findall(inflated))
    return pages or max(1, math.ceil(len(data) / _PDF_BYTES_PER_UNCOUNTED_PAGE))


def _image_part_tokens(payload: Mapping[str, Any]) -> int:
    detail = payload.get("detail")
    encoded = _inline_base64(payload.get("url"))
    size = image_size(_decode_head(encoded)) if encoded is not None else None
    if size is None or min(size) <= 0:
        return max(UNSIZED_PART_TOKENS,
                   openai_image_tokens(_FIT_PX, _SHORT_SIDE_PX, detail))
    return image_tokens(size[0], size[1], detail if isinstance(detail, str) else None)


def _audio_part_tokens(payload: Mapping[str, Any]) -> int:
    encoded = _inline_base64(payload.get("data"))
    if encoded is None:
        return UNSIZED_PART_TOKENS
    audio_format = payload.get("format")
    head = _decode(encoded[:_HEAD_BYTES // 3 * 4]) or b""
    if head[:3] == b"ID3" and _mp3_byte_rate(head) is None:  # a long tag (cover art) first
        head = _decode(encoded) or head
    seconds = audio_seconds(head, audio_format if isinstance(audio_format, str) else None,
                            size=_decoded_size(encoded))
    return max(1, math.ceil(seconds * AUDIO_TOKENS_PER_SECOND))


def _file_part_tokens(payload: Mapping[str, Any]) -> int:
    encoded = _inline_base64(payload.get("file_data"))
    if encoded is None:
        return UNSIZED_PART_TOKENS
    data = _decode(encoded)
    if data is None:
        return UNSIZED_PART_TOKENS
    if data[:5] != b"%PDF-":
        return max(1, len(data) // 2)  # not a PDF: as dense as base64 text (bytes / 2)
    return pdf_pages(data) * TOKENS_PER_PDF_PAGE


def _inline_base64(value: object) -> str | None:
    """The base64 text of a `data:` URL (`data:image/png;base64,...`), or of a bare base64
    string; None for anything else (a web address)."""
    if not isinstance(value, str) or not value:
        return None
    if value.startswith("data:"):
        head, sep, body = value.partition(",")
        return body if sep and head.endswith(";base64") else None
    if "://" in value[:16]:
        return None
    return value


def _decode_head(encoded: str) -> bytes:
    """The first bytes of base64 `encoded`, enough for a header; a JPEG whose frame size lies
    beyond them is decoded whole."""
    head = _decode(encoded[:_HEAD_BYTES // 3 * 4]) or b""
    if head.startswith(b"\xff\xd8") and _jpeg_size(head) is None and len(encoded) > len(head):
        head = _decode(encoded[:_MOST_JPEG_HEAD // 3 * 4]) or head
    return head


def _decoded_size(encoded: str) -> int:
    """Bytes that base64 `encoded` holds, without decoding it."""
    return len(encoded) * 3 // 4 - len(encoded[-2:]) + len(encoded[-2:].rstrip("="))


def _decode(encoded: str) -> bytes | None:
    try:
        return base64.b64decode(encoded, validate=False)
    except (binascii.Error, ValueError):
        return None
