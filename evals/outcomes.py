"""Outcome datasets: per-prompt scores of several models, loaded into typed rows and arrays.

Reads the JSONL format of `evals/datasets/routing/` (RouteLLM's two-model MMLU and GSM8K) and
`evals/datasets/routing_multi/` (ZeroEval's N-model GSM8K, MATH level 5, CRUXEval), gzipped or
not. Decontamination follows the routing README: rows marked `contaminated` are dropped, file
order kept. Fold grouping keys (same text or same reading passage share a key) live here too.
What is *not* here: metrics (`evals.metrics`), splitting (`evals.folds`), routers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

DATA_DIR = Path(__file__).resolve().parent / "datasets"
ROUTING_DIR = DATA_DIR / "routing"
MULTI_DIR = DATA_DIR / "routing_multi"

_PASSAGE_PREFIX = "This question refers to the following information."


@dataclass(frozen=True)
class Price:
    """A model's list price in USD per one million input and output tokens."""

    input_per_1m: float
    output_per_1m: float


@dataclass(frozen=True)
class OutcomeRow:
    """One prompt with every model's recorded score and (where known) cost in USD."""

    id: str
    benchmark: str
    category: str
    text: str
    scores: Mapping[str, float]
    prompt_tokens: int
    cost: Mapping[str, float]
    contaminated: bool
    group: str


@dataclass(frozen=True)
class OutcomeTable:
    """Rows of one dataset as aligned arrays over a fixed model list (column j = models[j])."""

    models: tuple[str, ...]
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    categories: tuple[str, ...]
    benchmarks: tuple[str, ...]
    groups: tuple[str, ...]
    prompt_tokens: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    costs: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, index: npt.NDArray[np.int64]) -> OutcomeTable:
        """The sub-table of the rows at `index` (in that order)."""
        pick = [int(i) for i in index]
        return OutcomeTable(
            models=self.models,
            ids=tuple(self.ids[i] for i in pick),
            texts=tuple(self.texts[i] for i in pick),
            categories=tuple(self.categories[i] for i in pick),
            benchmarks=tuple(self.benchmarks[i] for i in pick),
            groups=tuple(self.groups[i] for i in pick),
            prompt_tokens=self.prompt_tokens[index],
            scores=self.scores[index],
            costs=self.costs[index],
        )

    def select(self, columns: Sequence[int]) -> OutcomeTable:
        """The same rows over the model columns `columns` (in that order)."""
        cols = list(columns)
        return OutcomeTable(
            models=tuple(self.models[j] for j in cols),
            ids=self.ids,
            texts=self.texts,
            categories=self.categories,
            benchmarks=self.benchmarks,
            groups=self.groups,
            prompt_tokens=self.prompt_tokens,
            scores=self.scores[:, cols],
            costs=self.costs[:, cols],
        )

    def column(self, model: str) -> int:
        """The column index of `model`; KeyError naming the known models if absent."""
        if model not in self.models:
            raise KeyError(f"model {model!r} not in {list(self.models)}")
        return self.models.index(model)


def group_key(text: str) -> str:
    """Fold-grouping key: the reading passage for passage questions, else the normalised text."""
    norm = re.sub(r"\s+", " ", text.strip())
    if norm.startswith(_PASSAGE_PREFIX):
        body = text.strip()[len(_PASSAGE_PREFIX) :].strip()
        passage = body.split("\n")[0]
        return "passage:" + hashlib.sha1(passage.encode()).hexdigest()
    return "text:" + hashlib.sha1(norm.encode()).hexdigest()


def _open_lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        yield from fh


def load_prices(path: Path) -> dict[str, Price]:
    """Prices from a `models.json` of either dataset folder (models without a price skipped)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    entries: list[dict[str, object]] = list(doc.get("models", []))
    for dataset in doc.get("datasets", {}).values():
        entries.extend(dataset.get("models", []))
    prices: dict[str, Price] = {}
    for entry in entries:
        pin, pout = (
            entry.get("price_usd_per_1m_input_tokens"),
            entry.get("price_usd_per_1m_output_tokens"),
        )
        if isinstance(pin, int | float) and isinstance(pout, int | float):
            prices[str(entry["name"])] = Price(float(pin), float(pout))
    return prices


@dataclass(frozen=True)
class TokenExtras:
    """Per model, from a RouteLLM benchmark's models.json entry: the few-shot prefix its
    requests carried and its average answer tokens (used when a row stores none for it)."""

    prefix: Mapping[str, int] = field(default_factory=dict)
    response: Mapping[str, int] = field(default_factory=dict)


def _routing_cost(
    raw: Mapping[str, object], prices: Mapping[str, Price], extra: TokenExtras
) -> dict[str, float]:
    """USD per model for a RouteLLM row: (prompt + few-shot prefix) in, stored answer out."""
    prompt = int(raw["prompt_tokens"])  # type: ignore[call-overload]
    out_raw = raw.get("response_tokens")
    outs = out_raw if isinstance(out_raw, dict) else {}
    cost: dict[str, float] = {}
    for model, price in prices.items():
        tokens_in = prompt + extra.prefix.get(model, 0)
        tokens_out = int(outs.get(model, extra.response.get(model, 1)))
        cost[model] = (tokens_in * price.input_per_1m + tokens_out * price.output_per_1m) / 1e6
    return cost


class RowError(ValueError):
    """A field of one row has a value the loader refuses (the message names the field)."""


def _number(value: object, what: str) -> float:
    """A JSON number (not a string, not true/false) that is finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RowError(f"{what} is {json.dumps(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:  # a JSON integer beyond any float: 1 followed by 400 zeros
        raise RowError(f"{what} is an integer of {len(str(abs(value)))} digits, not a finite "
                       "number") from None
    if not math.isfinite(number):
        raise RowError(f"{what} is {value}, not a finite number")
    return number


def _score(value: object, model: str) -> float:
    """A score in [0, 1] (1 = right)."""
    score = _number(value, f"score of {model!r}")
    if not 0.0 <= score <= 1.0:
        raise RowError(f"score of {model!r} is {value}, not in [0, 1]")
    return score


# The largest token count a row may hold: 2**53 - 1, the largest whole number a JSON reader
# keeps exactly as a float (1e30 overflowed the int64 token array with a traceback).
MAX_TOKENS = 2**53 - 1


def _count(value: object, what: str) -> int:
    """A token count: a whole number in [0, MAX_TOKENS]."""
    number = _number(value, what)
    if number < 0 or number != int(number):
        raise RowError(f"{what} is {value}, not a whole number >= 0")
    if number > MAX_TOKENS:
        raise RowError(f"{what} is {value}, above the largest token count {MAX_TOKENS} (2**53 - 1)")
    return int(number)


def _text(value: object, what: str) -> str:
    """A string field (a `null` prompt was read as the text "None", and every such row was
    one prompt group: the evals audit of 2026-12-07)."""
    if not isinstance(value, str):
        raise RowError(f"{what} is {json.dumps(value)}, not a string")
    return value


def _cost(value: object, model: str) -> float:
    """A cost in USD >= 0."""
    cost = _number(value, f"cost of {model!r}")
    if cost < 0:
        raise RowError(f"cost of {model!r} is {value}, below 0")
    return cost


def _flag(value: object, what: str) -> bool:
    """A JSON true/false (a string "false" would read as true)."""
    if not isinstance(value, bool):
        raise RowError(f"{what} is {json.dumps(value)}, not true or false")
    return value


def _mapping(raw: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = raw[key]
    if not isinstance(value, dict):
        raise RowError(f"{key} is {type(value).__name__}, not an object")
    return value


def _check_answer_tokens(raw: Mapping[str, object]) -> None:
    outs = raw.get("response_tokens")
    if isinstance(outs, dict):
        for model, value in outs.items():
            _count(value, f"response_tokens of {model!r}")


def parse_row(
    raw: Mapping[str, object], prices: Mapping[str, Price], extra: TokenExtras
) -> OutcomeRow:
    """One JSON object of either format as an `OutcomeRow`; RowError names a refused value
    (a score outside [0, 1] or not finite, a negative token count or cost, a `contaminated`
    that is not true/false), KeyError a missing field."""
    scores = {str(k): _score(v, str(k)) for k, v in _mapping(raw, "scores").items()}
    cost_raw = raw.get("cost_est", raw.get("cost"))
    if isinstance(cost_raw, dict):
        cost = {str(k): _cost(v, str(k)) for k, v in cost_raw.items()}
        tokens_raw = raw.get("tokens_est", raw.get("tokens", {}))
        first = next(iter(dict(tokens_raw).values()), {"in": 0})  # type: ignore[call-overload]
        prompt_tokens = _count(first["in"], "tokens_est in")
    else:
        prompt_tokens = _count(raw["prompt_tokens"], "prompt_tokens")
        _check_answer_tokens(raw)
        cost = _routing_cost(raw, prices, extra)
    text = _text(raw["prompt"], "prompt")
    return OutcomeRow(
        id=str(raw["id"]),
        benchmark=str(raw["benchmark"]),
        category=_text(raw["category"], "category"),
        text=text,
        scores=MappingProxyType(scores),
        prompt_tokens=prompt_tokens,
        cost=MappingProxyType(cost),
        contaminated=_flag(raw.get("contaminated", False), "contaminated"),
        group=group_key(text),
    )


def _token_extras(path: Path, benchmark: str) -> TokenExtras:
    """Each model's few-shot prefix and default answer tokens of a RouteLLM benchmark
    (models.json), kept per model (not the last model's for all)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    prefix, response = {}, {}
    for entry in doc.get("models", []):
        avg = entry.get("avg_tokens", {}).get(benchmark, {})
        prefix[str(entry["name"])] = int(avg.get("few_shot_prefix_tokens", 0))
        response[str(entry["name"])] = round(float(avg.get("avg_response_tokens", 1)))
    return TokenExtras(MappingProxyType(prefix), MappingProxyType(response))


class OutcomeFileError(ValueError):
    """An outcome file's line cannot be read: the message names the file, line and field."""


def load_rows(path: Path | str, *, decontaminate: bool = True) -> list[OutcomeRow]:
    """Every row of an outcome file (file order); contaminated rows dropped unless asked.

    A prompt id seen twice in one benchmark is refused (OutcomeFileError naming both lines):
    a row is one prompt's scores, so a repeated one (files joined twice, a re-run appended)
    would count its prompt twice, or hold two scores of it with nothing to say which is right.
    Ids only need to differ within a benchmark, as each is replayed on its own."""
    path = Path(path)
    models_json = path.parent / "models.json"
    prices = load_prices(models_json) if models_json.exists() else {}
    rows: list[OutcomeRow] = []
    extras: dict[str, TokenExtras] = {}
    first_line: dict[tuple[str, str], int] = {}
    for number, line in enumerate(_open_lines(path), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict):
                raise RowError(f"a JSON {type(raw).__name__}, not an object")
            bench = str(raw["benchmark"])
            if bench not in extras:
                extras[bench] = (_token_extras(models_json, bench) if models_json.exists()
                                 else TokenExtras())
            row = parse_row(raw, prices, extras[bench])
        except RowError as exc:
            raise OutcomeFileError(f"{path} line {number}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise OutcomeFileError(f"{path} line {number}: not JSON ({exc.msg})") from None
        except KeyError as exc:
            raise OutcomeFileError(f"{path} line {number}: missing field {exc.args[0]!r}") \
                from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise OutcomeFileError(f"{path} line {number}: bad value ({exc})") from None
        seen = first_line.setdefault((row.benchmark, row.id), number)
        if seen != number:
            raise OutcomeFileError(
                f"{path} line {number}: prompt id {row.id!r} of {row.benchmark} is already on "
                f"line {seen}: each prompt once (a repeated row would count it twice)")
        if decontaminate and row.contaminated:
            continue
        rows.append(row)
    return rows


def common_models(rows: Sequence[OutcomeRow], *, priced_only: bool) -> tuple[str, ...]:
    """Models scored on every row (and priced on every row if asked), sorted by name."""
    if not rows:
        return ()
    common = set(rows[0].scores)
    for row in rows:
        common &= set(row.scores)
        if priced_only:
            common &= set(row.cost)
    return tuple(sorted(common))


@dataclass(frozen=True)
class Coverage:
    """Which models and rows a table keeps, and what it left out and why."""

    models: tuple[str, ...]
    rows: tuple[OutcomeRow, ...]
    dropped_models: Mapping[str, str]  # model -> why ("scored on 399 of 400 rows")
    dropped_rows: int  # two-model data: rows without both scores

    def notes(self, benchmark: str | None = None) -> list[str]:
        """One line per thing left out, for stderr and the printed result."""
        where = f"{benchmark}: " if benchmark else ""
        found = []
        if self.dropped_rows:
            found.append(f"{where}dropped {self.dropped_rows} row(s) without a score for both "
                         f"{' and '.join(self.models)}")
        if self.dropped_models:
            found.append(f"{where}dropped {len(self.dropped_models)} model(s) not on every row: "
                         + "; ".join(f"{m} ({why})" for m, why in self.dropped_models.items()))
        return found


def coverage(rows: Sequence[OutcomeRow], *, priced_only: bool) -> Coverage:
    """Two-model data keeps both models and drops the rows missing either score; otherwise the
    models scored (and priced, if asked) on every row are kept and the others reported."""
    seen = sorted({m for r in rows for m in r.scores})
    if len(seen) == 2 and not priced_only:
        kept = tuple(r for r in rows if all(m in r.scores for m in seen))
        return Coverage(tuple(seen), kept, {}, len(rows) - len(kept))
    models = common_models(rows, priced_only=priced_only)
    dropped = {}
    for model in seen:
        if model in models:
            continue
        scored = sum(model in r.scores for r in rows)
        priced = sum(model in r.cost for r in rows)
        why = f"scored on {scored} of {len(rows)} rows"
        if priced_only and scored == len(rows):
            why = f"priced on {priced} of {len(rows)} rows"
        dropped[model] = why
    return Coverage(models, tuple(rows), dropped, 0)


def to_table(rows: Sequence[OutcomeRow], models: Sequence[str]) -> OutcomeTable:
    """Aligned arrays for `models`; a missing cost is NaN (a missing score raises KeyError)."""
    return OutcomeTable(
        models=tuple(models),
        ids=tuple(r.id for r in rows),
        texts=tuple(r.text for r in rows),
        categories=tuple(r.category for r in rows),
        benchmarks=tuple(r.benchmark for r in rows),
        groups=tuple(r.group for r in rows),
        prompt_tokens=np.array([r.prompt_tokens for r in rows], dtype=np.int64),
        scores=np.array([[r.scores[m] for m in models] for r in rows], dtype=np.float64),
        costs=np.array([[r.cost.get(m, np.nan) for m in models] for r in rows], dtype=np.float64),
    )


def load_table(
    path: Path | str,
    *,
    benchmark: str | None = None,
    models: Sequence[str] | None = None,
    priced_only: bool = False,
) -> OutcomeTable:
    """Decontaminated rows of one benchmark (or all) as a table over `models`, else the models
    `coverage` keeps (two-model data: both, over the rows that score both)."""
    return load_table_coverage(path, benchmark=benchmark, models=models,
                               priced_only=priced_only)[0]


def load_table_coverage(
    path: Path | str,
    *,
    benchmark: str | None = None,
    models: Sequence[str] | None = None,
    priced_only: bool = False,
) -> tuple[OutcomeTable, Coverage]:
    """`load_table` and what it left out (nothing is left out when `models` are given)."""
    rows = [r for r in load_rows(path) if benchmark is None or r.benchmark == benchmark]
    found = (Coverage(tuple(models), tuple(rows), {}, 0) if models is not None
             else coverage(rows, priced_only=priced_only))
    return to_table(found.rows, found.models), found


def file_sha256(path: Path | str) -> str:
    """Content hash of a file (the data hash stamped on trained artifacts)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rows_sha256(path: Path | str) -> str:
    """Hash of the rows a file holds, read as `load_rows` reads it: a `.gz` file's decompressed
    text, so a file and its gzipped copy (or one gzipped again at another level) hash alike."""
    path = Path(path)
    digest = hashlib.sha256()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
