"""Media content parts are priced by what their headers say: an image's size, a recording's
length, a PDF's pages (`router.media_tokens`)."""

from __future__ import annotations

import base64
import io
import wave
import zlib

import pytest
from PIL import Image

from router.api.schemas import ChatCompletionRequest
from router.classify.types import Labels
from router.media_tokens import (
    AUDIO_TOKENS_PER_SECOND,
    TOKENS_PER_PDF_PAGE,
    UNSIZED_PART_TOKENS,
    anthropic_image_tokens,
    image_size,
    media_part_tokens,
    openai_image_tokens,
    pdf_pages,
    whole_decoded_chars,
)
from router.pipeline import request_facts, request_view


def _image(width: int, height: int, fmt: str, **save: object) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, fmt, **save)
    return out.getvalue()


def _data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(("width", "height", "detail", "tokens"), [
    (1024, 1024, "high", 765),  # OpenAI's worked examples
    (2048, 4096, "high", 1105),
    (4096, 8192, "low", 85),
    (300, 200, "auto", 255),
])
def test_openai_tiles_follow_its_published_examples(width: int, height: int, detail: str,
                                                    tokens: int) -> None:
    assert openai_image_tokens(width, height, detail) == tokens


@pytest.mark.parametrize(("width", "height", "tokens"), [
    (200, 200, 54), (1000, 1000, 1334), (1092, 1092, 1568), (4000, 3000, 1568)])
def test_anthropic_pixels_follow_its_published_examples(width: int, height: int,
                                                        tokens: int) -> None:
    assert anthropic_image_tokens(width, height) == tokens


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "JPEG", "WEBP"])
def test_the_size_is_read_from_each_format_s_header(fmt: str) -> None:
    assert image_size(_image(1234, 567, fmt)) == (1234, 567)
    assert image_size(_image(1234, 567, fmt)[:4]) is None


def test_a_lossless_webp_and_one_with_an_alpha_channel_are_read_too() -> None:
    out = io.BytesIO()
    Image.new("RGBA", (640, 480), (0, 0, 0, 0)).save(out, "WEBP", lossless=True)
    assert image_size(out.getvalue()) == (640, 480)


def test_a_jpeg_whose_size_follows_a_long_exif_block_is_read_whole() -> None:
    jpeg = _image(1600, 900, "JPEG", exif=b"Exif\x00\x00" + bytes(60_000))
    part = {"url": _data_url(jpeg, "image/jpeg"), "detail": "high"}
    assert media_part_tokens("image_url", part) == max(openai_image_tokens(1600, 900, "high"),
                                                       anthropic_image_tokens(1600, 900))


def test_a_small_image_costs_less_than_a_large_one_and_low_detail_less_than_high() -> None:
    """The fixed 765 a part used to cost overpriced a thumbnail and underpriced a panorama."""
    def tokens(width: int, height: int, detail: str) -> int:
        return media_part_tokens("image_url", {
            "url": _data_url(_image(width, height, "PNG"), "image/png"), "detail": detail})

    assert tokens(64, 64, "high") == 255
    assert tokens(768, 2048, "high") == 1445 > 765  # OpenAI: 8 tiles, over Anthropic's 1230
    assert tokens(64, 64, "low") == 85
    assert tokens(2000, 2000, "low") == 1568  # Anthropic reads no `detail`


@pytest.mark.parametrize("url", ["https://example.com/cat.png", "data:image/png;base64,AAAA",
                                 "data:image/png,not-base64", "gs://bucket/cat.png", ""])
def test_an_image_that_cannot_be_read_is_priced_as_the_largest_one(url: str) -> None:
    assert media_part_tokens("image_url", {"url": url}) == UNSIZED_PART_TOKENS
    assert media_part_tokens("image_url", {}) == UNSIZED_PART_TOKENS


def _wav(seconds: float, rate: int = 16_000, width: int = 2, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(bytes(int(seconds * rate) * width * channels))
    return out.getvalue()


@pytest.mark.parametrize(("rate", "channels"), [(16_000, 1), (44_100, 2), (8_000, 1)])
def test_a_wav_recording_is_priced_by_its_length(rate: int, channels: int) -> None:
    data = base64.b64encode(_wav(30, rate=rate, channels=channels)).decode()
    tokens = media_part_tokens("input_audio", {"data": data, "format": "wav"})
    assert tokens == pytest.approx(30 * AUDIO_TOKENS_PER_SECOND, abs=2)


def _mp3(seconds: float, kbps_index: int = 9, id3: bytes = b"") -> bytes:
    """Frames of MPEG-1 layer III at 44.1 kHz (index 9: 128 kbit/s), after an optional ID3v2
    tag holding `id3`: enough of a file for its header to be read."""
    header = bytes([0xFF, 0xFB, (kbps_index << 4) | 0x00, 0x64])
    frame = header + bytes(144 * 128_000 // 44_100 - 4)
    frames = frame * int(seconds * 44_100 / 1152)
    if not id3:
        return frames
    size = len(id3)
    syncsafe = bytes([(size >> 21) & 0x7F, (size >> 14) & 0x7F, (size >> 7) & 0x7F, size & 0x7F])
    return b"ID3\x04\x00\x00" + syncsafe + id3 + frames


def test_an_mp3_recording_is_priced_by_its_frames_bit_rate_after_a_long_tag() -> None:
    plain = base64.b64encode(_mp3(60)).decode()
    tagged = base64.b64encode(_mp3(60, id3=bytes(200_000))).decode()  # cover art
    assert media_part_tokens("input_audio", {"data": plain, "format": "mp3"}) == pytest.approx(
        600, rel=0.02)
    tagged_tokens = media_part_tokens("input_audio", {"data": tagged, "format": "mp3"})
    assert 600 <= tagged_tokens <= 600 + 200_000 * 8 / 128_000 * AUDIO_TOKENS_PER_SECOND + 5


def test_a_recording_whose_header_says_nothing_is_counted_long() -> None:
    """32 kbit/s: an hour of 128 kbit/s music is counted as four hours, not as a 765-token
    image."""
    data = base64.b64encode(bytes(400_000)).decode()
    assert media_part_tokens("input_audio", {"data": data, "format": "ogg"}) == 1000
    assert media_part_tokens("input_audio", {}) == UNSIZED_PART_TOKENS


def _pdf(pages: int) -> bytes:
    out = io.BytesIO()
    first, *rest = [Image.new("RGB", (612, 792), (255, 255, 255)) for _ in range(pages)]
    first.save(out, "PDF", save_all=True, append_images=rest)
    return out.getvalue()


def _pdf_with_object_stream(pages: int) -> bytes:
    """Page objects packed in a compressed object stream (PDF 1.5), as many writers save."""
    objects = b"".join(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\n"
                       for _ in range(pages))
    packed = zlib.compress(objects)
    return (b"%PDF-1.5\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
            b"2 0 obj\n<< /Type /Pages /Count " + str(pages).encode() + b" >>\nendobj\n"
            b"3 0 obj\n<< /Type /ObjStm /N " + str(pages).encode() + b" /First 0 /Filter "
            b"/FlateDecode /Length " + str(len(packed)).encode() + b" >>\nstream\n"
            + packed + b"\nendstream\nendobj\n%%EOF\n")


@pytest.mark.parametrize("pages", [1, 7, 40])
def test_a_pdf_is_priced_by_its_pages(pages: int) -> None:
    assert pdf_pages(_pdf(pages)) == pages
    assert pdf_pages(_pdf_with_object_stream(pages)) == pages
    part = {"file_data": _data_url(_pdf(pages), "application/pdf"), "filename": "a.pdf"}
    assert media_part_tokens("file", part) == pages * TOKENS_PER_PDF_PAGE


def test_a_pdf_whose_pages_cannot_be_counted_is_sized_by_its_bytes() -> None:
    assert pdf_pages(b"%PDF-1.7\n" + bytes(500_000)) == 11


def test_a_file_by_id_and_a_file_that_is_not_a_pdf() -> None:
    assert media_part_tokens("file", {"file_id": "file-abc"}) == UNSIZED_PART_TOKENS
    text = base64.b64encode(b"a,b,c\n" * 1000).decode()
    assert media_part_tokens("file", {"file_data": f"data:text/csv;base64,{text}"}) == 3000


def test_the_request_estimate_adds_each_part() -> None:
    """A 40-page PDF is no longer a 765-token part: a cost ceiling and a context window see
    it."""
    pdf = _data_url(_pdf(40), "application/pdf")
    body = {"model": "auto", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "summarise"},
        {"type": "file", "file": {"file_data": pdf, "filename": "report.pdf"}},
        {"type": "image_url", "image_url": {
            "url": _data_url(_image(64, 64, "PNG"), "image/png"), "detail": "low"}}]}]}
    request = ChatCompletionRequest.model_validate(body)
    facts = request_facts(request, request_view(request), Labels(task="chat", risk="low"))
    assert 40 * TOKENS_PER_PDF_PAGE + 85 < facts.prompt_tokens < 40 * TOKENS_PER_PDF_PAGE + 120


def test_only_inline_files_are_read_whole() -> None:
    """What decides whether a request is prepared off the event loop: an inline file's base64
    is decoded and scanned whole, an image or a recording only for its header."""
    pdf = _data_url(_pdf(3), "application/pdf")
    assert whole_decoded_chars("file", {"file_data": pdf}) == len(pdf)
    assert whole_decoded_chars("file", {"file_id": "file-abc"}) == 0
    assert whole_decoded_chars("image_url", {"url": pdf}) == 0
    assert whole_decoded_chars("text", None) == 0


def test_a_pdf_of_many_inflating_object_streams_is_inflated_within_one_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each compressed object stream was inflated up to 8 MB on its own: a 3 MB file of 400
    streams of zeros, each 8 MB inflated, made 3.2 GB of work on the event loop for one request.
    The streams of one file share the 8 MB."""
    import router.media_tokens as media

    inflated: list[int] = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self) -> None:
            self._inner = real()

        def decompress(self, data: bytes, most: int) -> bytes:
            out = self._inner.decompress(data, most)
            inflated.append(len(out))
            return out

    monkeypatch.setattr(media.zlib, "decompressobj", Counting)
    bomb = zlib.compress(bytes(8 * 1024 * 1024), 9)
    stream = (b"1 0 obj\n<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + bomb
              + b"\nendstream\n")
    assert pdf_pages(b"%PDF-1.5\n" + stream * 400) >= 1
    assert sum(inflated) <= 8 * 1024 * 1024


def test_object_stream_markers_without_streams_are_read_once() -> None:
    """Each `/Type /ObjStm` was followed by a search to the end of the file for its `stream`
    keyword: quadratic, 140 KB of such markers took 4.9 s of CPU and a 4 MB body would have
    taken hours (with the GIL held, off the event loop or not). The keyword is looked for within
    1 KB, and at most 1,000 object streams of a file are read: this file is sized by its bytes
    in milliseconds (the suite's durations would show a return of the old search)."""
    data = b"%PDF-1.5\n" + b"/Type /ObjStm " * 20_000
    assert pdf_pages(data) == 6  # no page found: one page per 50 KB of its 280 KB


def test_crafted_jpegs_and_wav_headers_get_bounded_work_and_plausible_sizes() -> None:
    """From the re-audit: a JPEG of 3 MB of fill bytes (walked one byte at a time) or of tiny
    segments held the event loop a quarter of a second; a WAV header's byte rate of 1 made 3 MB
    31 million tokens, and of 4 GB/s one token (under any ceiling). Fill bytes are skipped at
    once, at most 512 segments and 1 MB of a JPEG are read, and the byte rate is held to what
    audio can be."""
    frame = b"\xff\xc0\x00\x11\x08\x02\x00\x03\x00\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    filled = b"\xff\xd8" + b"\xff" * 3_000_000 + frame
    assert image_size(filled) == (768, 512)
    tiny = b"\xff\xd8" + b"\xff\xe1\x00\x02" * 200_000 + frame
    assert image_size(tiny) is None  # past 512 segments: unsized, priced as the largest
    part = {"url": _data_url(tiny, "image/jpeg"), "detail": "high"}
    assert media_part_tokens("image_url", part) == UNSIZED_PART_TOKENS
    wav = bytearray(_wav(1))
    for rate in (1, 2**32 - 1):
        wav[28:32] = rate.to_bytes(4, "little")
        data = base64.b64encode(bytes(wav) + bytes(3_000_000)).decode()
        tokens = media_part_tokens("input_audio", {"data": data, "format": "wav"})
        clamped = (len(wav) + 3_000_000) / (1_000 if rate == 1 else 1_536_000)
        assert tokens == pytest.approx(clamped * AUDIO_TOKENS_PER_SECOND, rel=0.01, abs=1)
