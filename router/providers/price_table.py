"""litellm's bundled price table, read without importing litellm.

A deployment with no price in the config takes litellm's (per 1M tokens, and the prompt-cache
read price). Importing litellm costs a router several seconds of start-up and about 100 MB of
memory, which a router whose deployments all use the pass-through adapter would pay for this
table alone; so the table is read from the JSON file litellm ships, the same file litellm loads
when told to stay offline (`LITELLM_LOCAL_MODEL_COST_MAP`), with its rule for aliases: a row
whose `alias_of` names another row is served as that row, and one naming nothing is skipped.
`tests/meta/test_price_table.py` holds it to litellm's own `model_cost`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

BUNDLED_FILE = "model_prices_and_context_window_backup.json"


class PriceTable:
    """Prices by litellm model string (`openai/gpt-4o-mini` or `gpt-4o-mini`)."""

    def __init__(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        self._rows = rows

    @classmethod
    def bundled(cls) -> PriceTable:
        """The table of the installed litellm package."""
        spec = importlib.util.find_spec("litellm")
        if spec is None or spec.origin is None:
            raise RuntimeError("litellm is not installed: its price table is needed")
        raw = orjson.loads((Path(spec.origin).parent / BUNDLED_FILE).read_bytes())
        return cls(resolve_aliases(raw))

    def prices(self, model: str) -> tuple[float, float] | None:
        """(input, output) USD per 1M tokens, if the table knows the model."""
        row = self._row_with(model, "input_cost_per_token")
        if row is None:
            return None
        return (float(row["input_cost_per_token"]) * 1e6,
                float(row.get("output_cost_per_token") or 0.0) * 1e6)

    def cached_input_price(self, model: str) -> float | None:
        """USD per 1M prompt tokens read from the provider's prompt cache, if known."""
        return self._per_million(model, "cache_read_input_token_cost")

    def cache_write_price(self, model: str) -> float | None:
        """USD per 1M prompt tokens written into the provider's prompt cache, if known."""
        return self._per_million(model, "cache_creation_input_token_cost")

    def cache_write_1h_price(self, model: str) -> float | None:
        """USD per 1M prompt tokens written into Anthropic's 1-hour prompt cache, if known."""
        return self._per_million(model, "cache_creation_input_token_cost_above_1hr")

    def _per_million(self, model: str, field: str) -> float | None:
        row = self._row_with(model, field)
        return None if row is None else float(row[field]) * 1e6

    def _row_with(self, model: str, field: str) -> Mapping[str, Any] | None:
        """The row of `model` that has `field`: as written, else without its provider prefix
        when that row is the same provider's (litellm keys OpenAI's and Anthropic's models
        without one). Another provider's row is not its price: `hosted_vllm/gpt-4o-mini` is a
        model served on one's own machines, `together_ai/gpt-4o` no OpenAI contract, and both
        took OpenAI's list price. litellm's route segment (`bedrock/converse/<id>`) names how
        it calls the model, not another model: read without it."""
        model = _without_route(model)
        row = self._rows.get(model)
        if row and row.get(field) is not None:
            return row
        prefix, slash, bare = model.partition("/")
        row = self._rows.get(bare) if slash else None
        if row and row.get(field) is not None and _same_provider(prefix, row):
            return row
        return None


# litellm's route segments after a provider prefix: which of the provider's APIs it calls.
_ROUTES = ("converse/", "invoke/")


def _without_route(model: str) -> str:
    """`bedrock/converse/amazon.nova-micro-v1:0` as `bedrock/amazon.nova-micro-v1:0`."""
    provider, slash, rest = model.partition("/")
    for route in _ROUTES if slash else ():
        if rest.startswith(route):
            return f"{provider}/{rest[len(route):]}"
    return model


def _same_provider(prefix: str, row: Mapping[str, Any]) -> bool:
    """Whether a table row is priced for the provider `prefix` names (`bedrock_converse/` reads
    `bedrock` rows, `vertex_ai/` reads `vertex_ai-anthropic_models`): one provider's name begins
    with the other's. A row that names no provider is taken as it is."""
    listed = row.get("litellm_provider")
    if not isinstance(listed, str):
        return True
    return listed.startswith(prefix) or prefix.startswith(listed)


def resolve_aliases(raw: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Model rows only, each alias replaced by the row it names (one not naming a row dropped)."""
    rows: dict[str, Mapping[str, Any]] = {}
    for name, row in raw.items():
        if not isinstance(row, Mapping):
            continue
        target = row.get("alias_of")
        if isinstance(target, str):
            named = raw.get(target)
            if isinstance(named, Mapping) and "alias_of" not in named:
                rows[name] = named
            continue
        rows[name] = row
    return rows
