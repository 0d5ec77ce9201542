"""Benchmark: how the prompt token estimate compares with a real tokenizer, by kind of text.

    python -m bench.estimate_calibration [--windows 3] [--files 60] [--seed 1]

The estimate (`router/token_estimate.py`) guards the cost ceiling and the context fit, so its
low percentiles matter: a prompt counted under its tokens passes a ceiling it breaks, or is
sent to a model whose window it overflows. This prints, per kind of ASCII text, the 5th, 50th
and 95th percentiles of estimate / cl100k_base count and the share counted under it, for the
router's estimate beside four characters a token (what it counted for all ASCII text before
2026-12-05). The texts:

- 3,000-character windows (`--windows` per file) of up to `--files` files of each kind in this
  interpreter's installed packages (Python, JSON, YAML, Markdown, JavaScript, C, CSV, ...);
- compact and indented `json.dumps` of the shared prompt rows, as tool results come back;
- the shared English prompts of 40 characters or more, math apart
  (`/work/shared/data/prompts/`, read only here; skipped when absent);
- data pasted into prompts: base64 and hex of seeded random bytes.

The JavaScript windows are mostly of minified bundles already (139 of the 180 of the default
sample have no line break or whitespace run).

cl100k_base is read offline from the file litellm ships (`tests/support/tokenizer.py`). Seeded:
the same installation gives the same table.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sysconfig
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from router.cli_types import seed_number
from router.token_estimate import text_tokens
from tests.support.tokenizer import cl100k_counter

SHARED_PROMPTS = Path("/work/shared/data/prompts")
KINDS = ("py", "json", "yaml", "md", "rst", "js", "html", "css", "c", "h", "csv", "txt")
WINDOW = 3_000
ESTIMATES: dict[str, Callable[[str], float]] = {
    "estimate": text_tokens,
    "4 chars a token": lambda text: len(text) / 4,
}


def file_windows(kind: str, files: int, windows: int, rng: random.Random) -> Iterator[str]:
    """Windows of ASCII files of one kind under the installed packages (over 2,000 bytes)."""
    root = Path(sysconfig.get_paths()["purelib"])
    paths = sorted(p for p in root.rglob(f"*.{kind}") if p.is_file() and p.stat().st_size > 2000)
    rng.shuffle(paths)
    taken = 0
    for path in paths:
        if taken == files:
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.isascii():
            continue
        taken += 1
        for _ in range(windows):
            start = rng.randrange(max(1, len(text) - WINDOW))
            yield text[start:start + WINDOW]


def shared_texts() -> dict[str, list[str]]:
    """The shared English prompts (math apart) and JSON dumps of their rows, when present."""
    if not SHARED_PROMPTS.exists():
        return {}
    rows = [json.loads(line) for line in
            (SHARED_PROMPTS / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    english = [r for r in rows if r["text"].isascii() and len(r["text"]) >= 40]
    batches = [rows[i:i + 10] for i in range(0, 400, 10)]
    return {
        "prompts: math": [r["text"] for r in english if r["task"] == "math"],
        "prompts: other": [r["text"] for r in english if r["task"] != "math"],
        "json.dumps": [json.dumps(b) for b in batches],
        "json.dumps indent": [json.dumps(b, indent=2) for b in batches],
    }


def pasted_data(rng: random.Random) -> dict[str, list[str]]:
    """Base64 and hex of random bytes (300-3,000)."""
    return {
        "base64": [base64.b64encode(rng.randbytes(rng.randint(300, 3000))).decode()
                   for _ in range(60)],
        "hex": [rng.randbytes(rng.randint(200, 1500)).hex() for _ in range(40)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--windows", type=int, default=3, help="windows per file")
    parser.add_argument("--files", type=int, default=60, help="files per kind")
    parser.add_argument("--seed", type=seed_number, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    texts: dict[str, list[str]] = defaultdict(list)
    for kind in KINDS:
        texts[kind] = list(file_windows(kind, args.files, args.windows, rng))
    texts.update(shared_texts())
    texts.update(pasted_data(rng))
    count = cl100k_counter()
    print("estimate / cl100k_base count, by kind of text (p5 / p50 / p95, share under 1)")
    print(f"{'kind':<20}{'n':>6}" + "".join(f"{name:>30}" for name in ESTIMATES))
    for kind, items in texts.items():
        if len(items) < 2:
            continue
        actual = [count(t) for t in items]
        cells = []
        for estimate in ESTIMATES.values():
            ratios = [estimate(t) / a for t, a in zip(items, actual, strict=True) if a]
            under = sum(r < 1 for r in ratios) / len(ratios)
            p5, p50, p95 = np.percentile(ratios, [5, 50, 95])
            cells.append(f"{p5:.2f} / {p50:.2f} / {p95:.2f}, {under:4.0%}")
        print(f"{kind:<20}{len(items):>6}" + "".join(f"{c:>30}" for c in cells))


if __name__ == "__main__":
    main()
