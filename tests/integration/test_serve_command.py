"""`slorouter serve` as a process: refusing unsafe binds and reporting bad configs at once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.procs import PYTHON

CONFIG = """version: 1
deployments:
  - {name: d, model: openai/m, adapter: openai_passthrough, api_base: http://127.0.0.1:9/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}
models: [{name: m, deployments: [d]}]
routes: {default_model: m}
"""


def _serve(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    return subprocess.run([PYTHON, "-m", "router.cli", "serve", "--config", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def test_without_api_keys_it_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    """No api_keys and --host 0.0.0.0: exit 2 with the reason, before binding anything."""
    result = _serve(tmp_path, CONFIG, "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 2
    assert "only binds to loopback" in result.stderr


def test_an_invalid_config_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    """Two independent mistakes are both reported in one run."""
    broken = CONFIG.replace("openai_passthrough", "pigeon").replace("default_model: m",
                                                                      "default_model: zz")
    result = _serve(tmp_path, broken + "surprise: 1\n")
    assert result.returncode == 2
    assert "adapter" in result.stderr and "surprise" in result.stderr
