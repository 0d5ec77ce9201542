"""The result cache at the real service: simulator profiles, router configs, a caller.

Shared by the acceptance tests in `tests/caching/` and `bench/cache_hit.py`. Everything here
talks to real processes over loopback: the router's OpenAI API through the real `openai`
client (headers read with `with_raw_response`), and the simulator's `/control/stats`, which
counts upstream calls where they arrive (a cache hit is a request the simulator never saw).

What lives here: profiles, the YAML builder (backend, policies with per-task cache rules,
several API keys), the `Caller` that sends one chat request as a given principal with given
headers and returns what the client saw, and small readers. What does not: assertions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion

# Principals: two tenants, and a second key of tenant A with a wider scope set.
KEY_A = "sk-cache-tenant-a"
KEY_A_ADMIN = "sk-cache-tenant-a-admin"
KEY_B = "sk-cache-tenant-b"
KEYS_ENV = {"CACHE_KEY_A": KEY_A, "CACHE_KEY_A_ADMIN": KEY_A_ADMIN, "CACHE_KEY_B": KEY_B,
            "SIM_KEY": "sim-key"}

TTFT_MS = 40.0
DEFAULT_HINTS = {"x-slorouter-task": "chat", "x-slorouter-risk": "low"}
ALIASED_MODEL = "answers"  # a model whose name is not its deployment's name (`det`)
TTL_SHORT_S = 1.0  # the `extraction` policy's freshness; the TTL test waits past it
DEFAULT_TTL_S = 2.0  # `server.cache.default` (pinned requests): long enough for a test's hits



def steady(ttft_ms: float, tokens: int = 12, **changes: object) -> dict[str, object]:
    """A simulator profile with constant TTFT, TPOT (1 ms) and length, plus `changes`."""
    return {"ttft_p50_ms": ttft_ms, "ttft_p99_ms": ttft_ms, "tpot_p50_ms": 1,
            "tpot_p99_ms": 1, "output_tokens_p50": tokens, "output_tokens_p99": tokens,
            "output_tokens_max": tokens, **changes}


# One simulator model per behaviour, so per-model counters never mix scenarios.
SIM_MODELS: dict[str, dict[str, object]] = {
    "det": steady(TTFT_MS),           # answers; the cache's subject
    "flaky": steady(TTFT_MS),         # tests flip error_rate_500 on and off
    "cutter": steady(TTFT_MS, 30),    # tests flip cut_rate on and off
    "arm": steady(TTFT_MS),           # an experiment arm's model (test_experiments.py)
    "herd": steady(400.0),            # slow enough for identical requests to overlap
}


def policies_yaml(default_ttl_s: float = 600.0, revision: str = "r1") -> str:
    """Per-task cache rules: default on, `extraction` with a short TTL, `translation` off,
    `summarization` off at medium risk. `revision` goes into a field that changes the policy
    hash and nothing else (the SLO target of an unused task)."""
    slo_ms = {"r1": 5000, "r2": 6000}.get(revision, 7000)
    return f"""policies:
  default:
    candidates: [det]
    cache: {{enabled: true, ttl_s: {default_ttl_s}}}
  tasks:
    extraction:
      candidates: [det]
      cache: {{enabled: true, ttl_s: {TTL_SHORT_S}}}
    translation:
      candidates: [det]
      cache: {{enabled: false}}
    summarization:
      candidates: [det]
      cache: {{enabled: true, ttl_s: 600}}
      risk:
        medium: {{cache: false}}
    math:
      candidates: [det]
      slo: {{e2e_p99_ms: {slo_ms}}}
"""


def router_yaml(sim_base: str, cache_block: str, policies: str = "",
                stats_redis_url: str | None = None) -> str:
    """A `slorouter serve` config over the simulator's models, with three API keys,
    `server.cache` set to `cache_block` (an indented YAML block), optional policies, and the
    statistics shared through `stats_redis_url` when given."""
    stats = f"\n  stats:\n    redis_url: {stats_redis_url}" if stats_redis_url else ""
    deployments = "".join(
        f"\n  - name: {name}\n    model: openai/{name}\n    adapter: openai_passthrough"
        f"\n    api_base: {sim_base}/v1\n    input_price_per_mtok: 1\n"
        f"    output_price_per_mtok: 2\n    connect_timeout_s: 2\n    timeout_s: 5"
        for name in SIM_MODELS)
    models = "".join(f"\n  - name: {name}\n    deployments: [{name}]" for name in SIM_MODELS)
    models += f"\n  - name: {ALIASED_MODEL}\n    deployments: [det]"
    return f"""version: 1
deployments:{deployments}
models:{models}
routes:
  aliases: [auto]
  default_model: det
api_keys:
  - key: env:CACHE_KEY_A
    tenant: tenant-a
    scopes: [read]
  - key: env:CACHE_KEY_A_ADMIN
    tenant: tenant-a
    scopes: [read, admin]
  - key: env:CACHE_KEY_B
    tenant: tenant-b
    scopes: [read]
server:
  max_body_bytes: 65536
  request_timeout_s: 10
  cache:
{cache_block}{stats}
{policies}"""


def disk_cache_block(directory: str, ttl_s: float = DEFAULT_TTL_S) -> str:
    return (f"    backend: disk\n    directory: {directory}\n"
            f"    default: {{enabled: true, ttl_s: {ttl_s}}}")


def redis_cache_block(url: str, ttl_s: float = DEFAULT_TTL_S) -> str:
    return (f"    backend: redis\n    redis_url: {url}\n"
            f"    default: {{enabled: true, ttl_s: {ttl_s}}}")


_LETTERS_FOR_DIGITS = str.maketrans("0123456789", "ghijklmnop")


def unique_messages(label: str = "q") -> list[dict[str, str]]:
    """A prompt no other test sends, so entries never collide between tests or backends.

    The nonce has letters only: a run of digits in a uuid can look like a phone number to the
    classifier's PII detector, which raises the risk to `high` (over the hint) and bypasses."""
    nonce = uuid.uuid4().hex.translate(_LETTERS_FOR_DIGITS)
    return [{"role": "system", "content": "You answer in one short line."},
            {"role": "user", "content": f"{label} {nonce}: name three rivers."}]


@dataclass
class Seen:
    """What the client saw for one request."""

    status: int
    cache: str | None
    headers: Mapping[str, str]
    content: str | None = None
    finish_reason: str | None = None
    body: dict[str, Any] | None = None          # non-streaming: the whole completion
    chunks: list[dict[str, Any]] = field(default_factory=list)  # streaming: every chunk
    error: str | None = None


@dataclass
class Caller:
    """Sends chat requests to the router through the real `openai` client."""

    base_url: str
    timeout_s: float = 20.0
    _clients: dict[str, openai.OpenAI] = field(default_factory=dict)

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        if key not in self._clients:
            self._clients[key] = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=key,
                                               max_retries=0, timeout=self.timeout_s)
        return self._clients[key]

    def chat(self, messages: Sequence[Mapping[str, str]], *, model: str = "det",
             key: str = KEY_A, stream: bool = False, include_usage: bool = False,
             headers: Mapping[str, str] | None = None, **params: Any) -> Seen:
        """One request; `params` are body fields (temperature defaults to 0). Task and risk
        hints default to chat/low: the classifier must not turn a random test prompt into a
        high-risk or action request (which would bypass the cache)."""
        params.setdefault("temperature", 0)
        headers = {**DEFAULT_HINTS, **(headers or {})}
        if stream and include_usage:
            params["stream_options"] = {"include_usage": True}
        api = self.client(key).chat.completions.with_raw_response
        try:
            raw = api.create(model=model, messages=list(messages),  # type: ignore[arg-type]
                             stream=stream, extra_headers=headers, **params)
        except openai.APIStatusError as exc:
            return Seen(exc.status_code, exc.response.headers.get("x-slorouter-cache"),
                        exc.response.headers, error=type(exc).__name__)
        seen = Seen(raw.status_code, raw.headers.get("x-slorouter-cache"), raw.headers)
        if stream:
            return _read_stream(raw.parse(), seen)
        completion = raw.parse()
        assert isinstance(completion, ChatCompletion)
        seen.body = completion.model_dump(exclude_unset=True)
        seen.content = completion.choices[0].message.content
        seen.finish_reason = completion.choices[0].finish_reason
        return seen

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def _read_stream(stream: Any, seen: Seen) -> Seen:
    parts: list[str] = []
    try:
        for chunk in stream:
            seen.chunks.append(chunk.model_dump(exclude_unset=True))
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                seen.finish_reason = choice.finish_reason or seen.finish_reason
    except (openai.APIError, httpx.HTTPError) as exc:
        seen.error = type(exc).__name__
    seen.content = "".join(parts)
    return seen


class SimStats:
    """Per-model request counts from the simulator's `/control/stats` (upstream truth)."""

    def __init__(self, sim_base: str) -> None:
        self._base = sim_base

    def requests(self, model: str = "det") -> int:
        stats = httpx.get(f"{self._base}/control/stats", timeout=10).json()["models"]
        return int(stats.get(model, {}).get("requests", 0))

    def set_profile(self, model: str, **changes: object) -> None:
        response = httpx.post(f"{self._base}/control/models/{model}", json=changes, timeout=10)
        response.raise_for_status()


def direct_completion(sim_base: str, messages: Sequence[Mapping[str, str]],
                      model: str = "det", **params: Any) -> dict[str, Any]:
    """The simulator's own answer to the same body (deterministic content; ids differ)."""
    body = {"model": model, "messages": list(messages), "temperature": 0, **params}
    response = httpx.post(f"{sim_base}/v1/chat/completions", json=body, timeout=20,
                          headers={"authorization": "Bearer sim-key"})
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer
