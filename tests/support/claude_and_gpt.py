"""A router over one Anthropic deployment through litellm and one OpenAI pass-through, on the
simulator's two wires: what the capability tests (`n`, `logprobs`, `temperature`, JSON modes,
legacy functions) route between.

`claude` (`claude-m`, Anthropic through litellm, the cheaper), `gpt` (`gpt-m`, pass-through),
`mixed` (both, as replicas), and a policy for `auto` that ranks `claude` first (exploration
off: a probe may send a request to the dearer one)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator


def config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: claude-m, model: anthropic/m, adapter: litellm, api_base: {sim_base},
     api_key: env:SIM_KEY, input_price_per_mtok: 0.1, output_price_per_mtok: 0.1,
     max_output_tokens: 4096}}
  - {{name: gpt-m, model: openai/m, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models:
  - {{name: claude, deployments: [claude-m]}}
  - {{name: gpt, deployments: [gpt-m]}}
  - {{name: mixed, deployments: [claude-m, gpt-m]}}
routes: {{default_model: gpt, aliases: [auto]}}
policies:
  default: {{candidates: [claude, gpt], objective: min_cost}}
server: {{cache: {{backend: none}}, stats: {{explore_share: 0}}}}
"""


def client_of(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0,
                         timeout=20)


@dataclass(frozen=True)
class ClaudeAndGpt:
    router: Running
    config_path: Path  # the router's config, for the CLIs (`slorouter explain --config`)


@contextlib.contextmanager
def claude_and_gpt(directory: Path) -> Iterator[ClaudeAndGpt]:
    """The simulator (model `m`) and the router over it, stopped on exit."""
    with contextlib.ExitStack() as stack:
        sim = start_simulator(directory, {"m": FAST_PROFILE})
        stack.callback(sim.stop)
        text = config(sim.base_url)
        path = directory / "claude-and-gpt.yaml"
        path.write_text(text)
        running = start_router(directory, text, env={"SIM_KEY": "sim-key"})
        stack.callback(running.stop)
        yield ClaudeAndGpt(running, path)


def served_by(router: Running, model: str, stream: bool,
              prompt: str = "Write one line about the sea.", **fields: Any) -> str:
    """The deployment that answered one request (its answer checked to have content), with the
    request fields `fields` (`temperature=1.5`, `stop=["\\n"]`)."""
    reply = client_of(router).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], stream=stream, **fields)
    if stream:
        assert any(c.choices and c.choices[0].delta.content for c in reply.parse())
    else:
        assert reply.parse().choices[0].message.content
    return reply.headers["x-slorouter-model"]
