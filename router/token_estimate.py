"""How many tokens a text is, estimated from its characters by script, without a tokenizer.

The estimate guards the cost ceiling and the context fit, so it errs on the side of counting a
little too many. It runs on every request: an ASCII text (`str.isascii` reads a flag in CPython)
is four characters a token; any other costs one C-speed encode, which counts its ASCII
characters (four a token) apart from the others (1.2 tokens each, whatever their script).
Telling two-byte scripts (Persian, Arabic, Cyrillic) from three-byte ones (CJK, Indic) as well
took a second encode, about doubling the cost, to price Persian nearer its 0.9: not done.
`python -m bench.prompt_estimate` times it on 4,000-token prompts.

Calibrated offline against the tokenizer files litellm ships (cl100k_base, held to in
`tests/unit/test_token_estimate.py`; o200k_base and the legacy Claude tokenizer measured once
with the same files) on the project's English and Persian prompts and on a few CJK, Hindi and
Arabic sentences written for it (the project's data has none). Per
non-ASCII character cl100k_base, the most expensive of the current OpenAI tokenizers, takes
0.90 tokens for Persian (one prompt in a hundred 1.16), 1.05-1.07 for Chinese, Japanese and
Korean, 1.15 for Hindi, 0.83 for Arabic; English is 4.47 characters a token. o200k_base takes
0.3-0.7 there, which the estimate overcounts 2-4x; the legacy Claude tokenizer takes 1.19 per
Persian letter, about what the estimate counts. Emoji (2-3 tokens each) are undercounted.
"""

from __future__ import annotations

CHARS_PER_ASCII_TOKEN = 4
# cl100k_base per non-ASCII character: Hindi 1.15, CJK 1.05-1.07, Persian 0.90 (see above)
TOKENS_PER_OTHER_CHAR = 1.2


def text_tokens(text: str) -> float:
    """The estimated token count of `text` (fractional: sum them, then round down)."""
    if text.isascii():
        return len(text) / CHARS_PER_ASCII_TOKEN
    ascii_chars = len(text.encode("ascii", "ignore"))
    return (ascii_chars / CHARS_PER_ASCII_TOKEN
            + (len(text) - ascii_chars) * TOKENS_PER_OTHER_CHAR)


def utf8_tokens(data: bytes) -> float:
    """`text_tokens` of UTF-8 bytes (serialised JSON: tool schemas, tool call arguments), decoded
    only when not ASCII (`bytes.isascii` is one C-speed scan)."""
    if data.isascii():
        return len(data) / CHARS_PER_ASCII_TOKEN
    return text_tokens(data.decode())
