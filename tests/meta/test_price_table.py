"""The price table read from litellm's bundled file agrees with litellm's own `model_cost`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from router.providers.price_table import PriceTable
from tests.support.procs import PYTHON


def test_every_model_litellm_prices_is_priced_the_same() -> None:
    from router.providers import litellm_adapter  # noqa: F401, I001 - sets litellm's offline env
    import litellm

    table = PriceTable.bundled()
    checked = 0
    for name, row in litellm.model_cost.items():
        if "input_cost_per_token" in row:
            assert table.prices(name) == (float(row["input_cost_per_token"]) * 1e6,
                                          float(row.get("output_cost_per_token", 0.0)) * 1e6), name
            checked += 1
        if row.get("cache_read_input_token_cost") is not None:
            assert table.cached_input_price(name) == (
                float(row["cache_read_input_token_cost"]) * 1e6), name
    assert checked > 1000  # the whole table, aliases included
    assert table.prices("openai/gpt-4o-mini") == table.prices("gpt-4o-mini") is not None
    assert table.prices("openai/no-such-model-anywhere") is None


def test_a_router_without_litellm_deployments_never_imports_litellm(tmp_path: Path) -> None:
    """Start-up builds the whole app for a pass-through-only config; litellm stays unloaded
    (it would cost seconds of start-up and about 100 MB)."""
    config = tmp_path / "c.yaml"
    config.write_text("""version: 1
deployments:
  - {name: d, model: openai/gpt-4o-mini, adapter: openai_passthrough,
     api_base: http://127.0.0.1:9/v1}
models: [{name: m, deployments: [d]}]
routes: {default_model: m}
""")
    probe = f"""
import sys
from pathlib import Path
from policies.loader import load_config_file
from router.wiring import build_from_config
app, runtime = build_from_config(load_config_file(Path({str(config)!r}), {{}}), {{}}, Path("."))
assert runtime.deployments["d"].input_price_per_mtok > 0  # priced from litellm's table
print(sorted(m for m in sys.modules if m.split(".")[0] in ("litellm", "sklearn")))
"""
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_a_model_takes_the_price_of_its_provider_s_row_only() -> None:
    """litellm keys OpenAI's models without a prefix: `openai/gpt-4o-mini` reads that row,
    another provider's model of the same name does not (it took OpenAI's list price)."""
    table = PriceTable({"gpt-4o-mini": {"litellm_provider": "openai",
                                        "input_cost_per_token": 1.5e-07,
                                        "output_cost_per_token": 6e-07},
                        "m": {"litellm_provider": "bedrock", "input_cost_per_token": 1e-06}})
    assert table.prices("openai/gpt-4o-mini") == table.prices("gpt-4o-mini") == (0.15, 0.6)
    for model in ("hosted_vllm/gpt-4o-mini", "together_ai/gpt-4o-mini", "mistral/gpt-4o-mini"):
        assert table.prices(model) is None, model
    assert table.prices("bedrock_converse/m") == (1.0, 0.0)  # bedrock's own rows


def test_litellm_s_route_segment_is_not_part_of_the_model() -> None:
    """`bedrock/converse/<id>` (litellm's documented way to call Bedrock's Converse API) reads
    the row of `<id>`, as `bedrock/<id>` does: it found none, and start-up refused the
    deployment unless both prices were set by hand (the provider audit of 2026-12-07)."""
    table = PriceTable.bundled()
    for model in ("amazon.nova-micro-v1:0", "us.amazon.nova-micro-v1:0"):
        priced = table.prices(f"bedrock/{model}")
        assert priced is not None
        assert table.prices(f"bedrock/converse/{model}") == priced
        assert table.prices(f"bedrock/invoke/{model}") == priced
    assert table.prices("bedrock/converse/no-such-model") is None
