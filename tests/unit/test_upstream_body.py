"""What the provider receives of a client's body (`router.pipeline.upstream_body`)."""

from __future__ import annotations

import dataclasses

import pytest

from cache.prefix import cache_salt
from router.pipeline import Caller, upstream_body
from router.prefix import affinity_order, marked_bodies
from router.providers.base import Deployment


def test_a_clients_own_prompt_cache_key_stays_within_its_tenant() -> None:
    """Two tenants choosing the same `prompt_cache_key` get different keys upstream (whatever
    the provider, marked prefix or not); one tenant's key is stable and keeps its grouping."""
    body = {"model": "auto", "stream": True, "prompt_cache_key": "shared",
            "messages": [{"role": "user", "content": "hi"}]}
    acme, again, globex = (upstream_body(body, "acme"), upstream_body(body, "acme"),
                           upstream_body(body, "globex"))
    other_key = upstream_body({**body, "prompt_cache_key": "other"}, "acme")
    assert acme["prompt_cache_key"] == again["prompt_cache_key"]
    assert len({acme["prompt_cache_key"], globex["prompt_cache_key"],
                other_key["prompt_cache_key"], "shared"}) == 4
    assert {k: v for k, v in acme.items() if k != "prompt_cache_key"} == {
        "messages": body["messages"]}
    long_prefix = {**body, "messages": [{"role": "system", "content": "x" * 5000},
                                        {"role": "user", "content": "hi"}]}
    marked = marked_bodies(upstream_body(long_prefix, "acme"), "acme")["openai"]
    assert marked["prompt_cache_key"] == upstream_body(long_prefix, "acme")["prompt_cache_key"]
    assert "prompt_cache_key" not in upstream_body({k: v for k, v in body.items()
                                                    if k != "prompt_cache_key"}, "acme")


def test_bodies_are_marked_only_for_the_prompt_cache_kinds_asked_for() -> None:
    """A plan whose deployments have no provider prompt cache (`other`) gets no marked body;
    one with only OpenAI deployments gets only OpenAI's."""
    body = upstream_body({"model": "auto", "messages": [
        {"role": "system", "content": "x" * 5000}, {"role": "user", "content": "hi"}]}, "acme")
    assert set(marked_bodies(body, "acme")) == {"anthropic", "openai"}
    assert set(marked_bodies(body, "acme", {"openai", "other"})) == {"openai"}
    assert marked_bodies(body, "acme", {"other"}) == {}


def test_a_self_hosted_body_carries_the_tenants_cache_salt_whatever_its_prefix() -> None:
    """The `salted` body (self-hosted servers) has the tenant's salt, for short prompts too (a
    server caches any prefix); a client's own salt, scoped by `upstream_body`, is kept; a
    `null` one is replaced. No other body gets a salt."""
    raw = {"model": "auto", "messages": [{"role": "system", "content": "x" * 5000},
                                         {"role": "user", "content": "hi"}]}
    for messages in (raw["messages"], [{"role": "user", "content": "hi"}]):
        bodies = marked_bodies(upstream_body({**raw, "messages": messages}, "acme"), "acme",
                               {"openai", "salted"})
        assert bodies["salted"]["cache_salt"] == cache_salt("acme")
        assert all("cache_salt" not in body for kind, body in bodies.items() if kind != "salted")
    chosen = upstream_body({**raw, "cache_salt": "blue"}, "acme")
    salt = chosen.pop("cache_salt")  # as the pipeline takes it: for the salted body only
    bodies = marked_bodies(chosen, "acme", {"salted", "openai", "other"}, chosen_salt=salt)
    assert bodies["salted"]["cache_salt"] == cache_salt("acme", "blue")
    # OpenAI, which refuses a field it does not know, gets none, nor a server with salting
    # off (no body of its own: the plan's, which holds none)
    assert "cache_salt" not in bodies["openai"] and "other" not in bodies
    nulled = upstream_body({**raw, "cache_salt": None}, "acme")
    bodies = marked_bodies(nulled, "acme", {"salted"}, chosen_salt=nulled.pop("cache_salt"))
    assert bodies["salted"]["cache_salt"] == cache_salt("acme")


def _deployment(model: str, api_base: str | None, adapter: str = "litellm",
                salt: bool = True) -> Deployment:
    return Deployment(name="d", model=model, adapter=adapter,  # type: ignore[arg-type]
                      api_base=api_base, api_key=None, input_price_per_mtok=1.0,
                      output_price_per_mtok=1.0, context_window=None, tenant_cache_salt=salt)


@pytest.mark.parametrize(("deployment", "kind"), [
    (_deployment("openai/llama", "http://vllm:8000/v1"), "salted"),
    (_deployment("hosted_vllm/llama", "http://vllm:8000/v1"), "salted"),
    (_deployment("openai/llama", "http://vllm:8000/v1", "openai_passthrough"), "salted"),
    (_deployment("openai/llama", "http://vllm:8000/v1", salt=False), "other"),
    (_deployment("gemini/gemini-2.5-flash", None), "other"),  # not OpenAI's wire
    (_deployment("azure/gpt-4o", "https://r.openai.azure.com"), "other"),  # OpenAI's, hosted
    (_deployment("openai/gpt-4o", None), "openai"),
    (_deployment("openai/gpt-4o", "https://api.openai.com/v1", "openai_passthrough"), "openai"),
    (_deployment("anthropic/claude-haiku-4-5", None), "anthropic"),
])
def test_only_self_hosted_openai_compatible_servers_get_the_salted_body(
        deployment: Deployment, kind: str) -> None:
    """`tenant_cache_salt` (on by default) applies to OpenAI-wire servers of kind `other`."""
    assert deployment.body_kind == kind


def test_two_tenants_identical_prefixes_are_placed_independently() -> None:
    """Affinity keys on tenant + prefix: one tenant's prefix always gets the same replica; over
    many prefixes, the two tenants' replicas for the same prefix often differ (the placement
    of one says nothing of the other's)."""
    replicas = ("r0", "r1", "r2")
    differ = 0
    for n in range(60):
        body = {"messages": [{"role": "system", "content": f"prompt {n}"},
                             {"role": "user", "content": "hi"}]}
        acme = affinity_order(replicas, replicas, body, "acme", {})
        assert acme == affinity_order(replicas, replicas, body, "acme", {})
        differ += acme[0] != affinity_order(replicas, replicas, body, "globex", {})[0]
    assert 20 <= differ <= 60


@pytest.mark.parametrize(("model", "api_base", "adapter", "salt", "names"), [
    ("gpt-4o", None, "litellm", True, ("gpt-4o", "openai", "openai", "openai")),
    ("openai/gpt-4o", "https://api.openai.com/v1", "litellm", True,
     ("gpt-4o", "openai", "openai", "openai")),
    ("anthropic/claude-x", None, "litellm", True,
     ("claude-x", "anthropic", "anthropic", "anthropic")),
    ("openai/llama", "http://vllm:8000/v1", "litellm", True,
     ("llama", "openai", "other", "salted")),
    ("openai/llama", "http://vllm:8000/v1", "litellm", False,
     ("llama", "openai", "other", "other")),
    ("hosted_vllm/meta/llama-3", "http://vllm:8000/v1", "litellm", True,
     ("meta/llama-3", "hosted_vllm", "other", "salted")),
    ("bench", "http://sim:8001/v1", "openai_passthrough", True,
     ("bench", "openai", "other", "salted")),
    ("groq/llama-3", None, "litellm", True, ("llama-3", "groq", "other", "other")),
])
def test_a_deployment_derives_its_names_once_and_again_when_replaced(
        model: str, api_base: str | None, adapter: str, salt: bool,
        names: tuple[str, str, str, str]) -> None:
    """Upstream model, provider, prompt-cache kind and body kind, from the model string, the
    base URL, the adapter and `tenant_cache_salt`; a copy with another model re-derives them."""
    made = _deployment(model, api_base, adapter, salt)
    assert (made.upstream_model, made.provider, made.prompt_cache_kind, made.body_kind) == names
    other = dataclasses.replace(made, model="anthropic/claude-y")
    assert (other.upstream_model, other.provider, other.body_kind) == (
        "claude-y", "anthropic", "anthropic")


def test_a_null_prompt_cache_key_leaves_room_for_the_tenants_own() -> None:
    """`"prompt_cache_key": null` is no key (OpenAI's reading): it is not sent on, and a
    marked prefix gets the tenant's key in its place, as when the field is absent."""
    raw = {"model": "auto", "prompt_cache_key": None,
           "messages": [{"role": "system", "content": "x" * 5000},
                        {"role": "user", "content": "hi"}]}
    nulled = upstream_body(raw, "acme")
    absent = upstream_body({k: v for k, v in raw.items() if k != "prompt_cache_key"}, "acme")
    assert "prompt_cache_key" not in nulled
    marked = marked_bodies(nulled, "acme", {"openai"})["openai"]["prompt_cache_key"]
    assert isinstance(marked, str)
    assert marked == marked_bodies(absent, "acme", {"openai"})["openai"]["prompt_cache_key"]


def test_prefix_caches_are_partitioned_by_tenant_and_permission_scopes() -> None:
    """Two keys of one tenant with different scopes mark the same prefix with different
    provider keys and salts (a key with fewer scopes learns nothing of what one with more
    sent); the same scopes in another order share theirs; no scopes is the tenant alone."""
    body = upstream_body({"model": "auto", "messages": [
        {"role": "system", "content": "x" * 5000}, {"role": "user", "content": "hi"}]}, "acme")
    kinds = {"openai", "salted"}

    def marks(caller: Caller) -> tuple[object, object]:
        bodies = marked_bodies(body, caller.prefix_partition(), kinds)
        return bodies["openai"]["prompt_cache_key"], bodies["salted"]["cache_salt"]

    reader = marks(Caller("acme", scopes=("docs:read",)))
    admin = marks(Caller("acme", scopes=("admin", "docs:read")))
    assert reader[0] != admin[0] and reader[1] != admin[1]
    assert marks(Caller("acme", scopes=("docs:read", "admin"))) == admin
    assert marks(Caller("acme")) == marks(Caller("acme", scopes=()))
    assert Caller("acme").prefix_partition() == "acme"
    assert marks(Caller("acme")) != reader
    assert marks(Caller("globex", scopes=("docs:read",))) != reader


def test_the_routers_own_metadata_keys_do_not_reach_the_provider() -> None:
    """A task or risk hint, the data version and the session given in `metadata` are the
    router's: the provider gets the client's other tags only, and no `metadata` when none is
    left (OpenAI refuses `metadata` without `store: true`, so a hint there became its 400). A
    `task` that names no task is the client's own tag and goes on."""
    def sent(metadata: dict[str, str]) -> object:
        return upstream_body({"model": "auto", "metadata": metadata,
                              "messages": [{"role": "user", "content": "hi"}]},
                             "acme").get("metadata")

    assert sent({"task": "code", "risk": "low", "session_id": "s1", "data_version": "v2"}) is None
    assert sent({"task": "code", "team": "search"}) == {"team": "search"}
    assert sent({"task": "ticket-triage"}) == {"task": "ticket-triage"}


@pytest.mark.parametrize(("fields", "sent"), [
    ({"top_logprobs": 0}, {}),
    ({"top_logprobs": 0, "logprobs": False}, {"logprobs": False}),
    ({"top_logprobs": 0, "logprobs": True}, {"top_logprobs": 0, "logprobs": True}),
    ({"top_logprobs": 3, "logprobs": True}, {"top_logprobs": 3, "logprobs": True}),
])
def test_zero_alternatives_without_logprobs_are_not_sent(fields: dict[str, object],
                                                        sent: dict[str, object]) -> None:
    """`top_logprobs: 0` without `logprobs: true` asks for nothing, and OpenAI-wire servers
    disagree on it (vLLM takes it, a strict check refuses it): left out, every deployment
    answers the request alike. With `logprobs` it goes as sent."""
    body = upstream_body({"model": "auto", "messages": [{"role": "user", "content": "hi"}],
                          **fields}, "acme")
    assert {k: v for k, v in body.items() if k in ("top_logprobs", "logprobs")} == sent
