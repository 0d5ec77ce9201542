"""What the provider receives of a client's body (`router.pipeline.upstream_body`)."""

from __future__ import annotations

from router.pipeline import upstream_body
from router.prefix import marked_bodies


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
