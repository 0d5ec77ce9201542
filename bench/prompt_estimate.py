"""Benchmark: CPU time of the router's prompt token estimate (`estimate_prompt_tokens`).

It runs on every request's path (fit and cost-ceiling checks). Times one call on a prompt of
about 4,000 tokens in English (ASCII), Persian, Chinese and English with emoji, after a short
system prompt, in process: the best and the median of `--repeats` blocks of `--number` calls
each, in µs per call.
The prompts are made here (repeated sentences), so the bench needs no data files.

Measured 2026-12-03 (2-core VM, load 1.1-1.4), best of 15 blocks of 2,000 calls, µs per call,
four characters a token for every script (before) / by script (`router/token_estimate.py`,
after), each prompt 4,004-4,010 cl100k_base tokens: English 21,200 chars 1.95 / 2.40 (the
per-text call; ASCII takes no extra pass), Persian 5,500 chars 1.95 / 9.1-9.4 (one ascii-ignore
encode, about 1.3 ns a character where letters and spaces interleave), Chinese 3,400 chars
1.93 / 3.96. Estimated tokens 1,394 -> 5,289 (Persian), 869 -> 4,099 (Chinese), 5,319 (English,
unchanged).
Emoji priced (2026-12-04, 2-core VM, load 1.3, best of 15 blocks): English 1.69 / 1.70-1.75,
Persian 7.96 / 8.31-8.65, Chinese 3.32 / 3.66-3.83 µs per call before / after (a size check
added to each non-ASCII text, about 0.4 µs); the emoji prompt (14,000 chars, 3,999 cl100k_base
tokens) `text_tokens` alone 16 / 31 µs (its UTF-8 form read twice), 4,133 -> 5,332 tokens.
The Basic Multilingual Plane's emoji blocks, arrows and operators priced (2026-12-04, the slow
AMD 2-core VM, load < 1, best of 15 blocks, µs per call before / after, two runs after):
English 1.74 / 1.75-1.82 (ASCII: no search), Persian 8.86 / 36.9-39.1, Chinese 3.85 /
22.8-23.0, emoji 32.7 / 43.5-47.4 (each text of two bytes a character is searched once by a
regular expression: about 28-30 µs for the 5,500 Persian characters); the four estimates are
unchanged (none of these prompts holds such a symbol).
ASCII digits and signs priced at 0.6 tokens each (2026-12-05, the slow AMD 2-core VM, load
0.6-0.8, best of 15 blocks, two runs each, µs per call before / after): English 1.69-1.70 /
13.8-14.0 (one `bytes.translate` pass over its 21,200 characters, about 0.6 ns each: ASCII
text is read once now), Persian 36.0-36.1 / 37.5, Chinese 20.9 / 21.6-21.7, emoji 41.2-42.3 /
47.1-48.3; estimates English 5,319 -> 5,427, Persian 5,289 -> 5,324, emoji 5,350 -> 5,351
(`python -m bench.estimate_calibration` compares them with cl100k_base by kind of text).
Every non-ASCII character weighed by a table generated from cl100k_base (2026-12-05, the slow
AMD 2-core VM, load 2.0-2.4, three alternating pairs, best of 15 blocks, µs per call before /
after): English 12.63-12.74 / 12.62-12.67 (ASCII: unchanged), Persian 22.0 / 14.0-14.2,
Chinese 11.6 / 7.6-7.8, emoji 38.9-40.9 / 25.3-25.6 (one UTF-16 encode and one numpy gather
and sum over packed weights, where an ASCII encode, the ASCII counts and a regular expression
ran); estimates Persian 5,319 -> 4,974, Chinese 4,099 -> 4,969, emoji 5,351 -> 5,295.

Run: `.venv/bin/python -m bench.prompt_estimate [--number N] [--repeats R]`
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from functools import partial

from router.classify.types import RequestView
from router.pipeline import estimate_prompt_tokens

SYSTEM = "You are a helpful assistant. Answer briefly."
# Sentences and how many characters make 4,000 tokens of each (cl100k_base: 4,004-4,010).
SENTENCES = {
    "english": ("Please summarise the quarterly report and list the three main risks. ", 21_200),
    "persian": ("لطفا گزارش فصلی را خلاصه کن و سه خطر اصلی را فهرست کن. ", 5_500),
    "chinese": ("请总结季度报告并列出三个主要风险。", 3_400),
    "emoji": ("Great job team 🎉 thanks for the quick fix 👍 see you tomorrow 😊 ", 14_000),
}


def prompt(sentence: str, chars: int) -> RequestView:
    text = (sentence * (chars // len(sentence) + 1))[:chars]
    return RequestView(messages=(("system", SYSTEM), ("user", text)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    for name, (sentence, chars) in SENTENCES.items():
        view = prompt(sentence, chars)
        runs = timeit.repeat(partial(estimate_prompt_tokens, view), number=args.number,
                             repeat=args.repeats)
        per_call = [r / args.number * 1e6 for r in runs]
        print(f"{name:8s} {chars:6d} chars -> {estimate_prompt_tokens(view):5d} tokens estimated:"
              f" best {min(per_call):.2f} µs, median {statistics.median(per_call):.2f} µs")


if __name__ == "__main__":
    main()
