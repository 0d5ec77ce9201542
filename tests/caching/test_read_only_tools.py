"""Requests that declare tools, at the real service: a read-only tool is no side effect.

A tool named `lookup_order` reads orders; `place_order` places them. At temperature 0 and a
chat/low hint, the first request's repeat is a cache hit (the simulator sees it once); the
second's is never cached, as side-effecting tools raise the risk over any hint and bypass.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.caching.service import Caller, SimStats, unique_messages

_ORDER_ID = {"type": "object", "properties": {"order_id": {"type": "string"}},
             "required": ["order_id"]}


def _tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": _ORDER_ID}}


# (tool name, description, cache label of the first and the repeated request, upstream calls)
TOOLS = {
    "read_only": ("lookup_order", "Look up an order's status by id", ["miss", "hit"], 1),
    "side_effecting": ("place_order", "Place an order for the given items",
                       ["bypass", "bypass"], 2),
}


@pytest.mark.parametrize(("name", "description", "labels", "upstream"), TOOLS.values(),
                         ids=TOOLS.keys())
def test_a_read_only_tool_is_cached_and_a_side_effecting_one_never(
        caller: Caller, sim_stats: SimStats, name: str, description: str, labels: list[str],
        upstream: int) -> None:
    """`lookup_order` opens with a read verb: `order` after it does not make it act, so the
    repeat is a hit. `place_order` places an order: every repeat goes upstream, bypassed."""
    messages = unique_messages(f"tool-{name}")
    tools = [_tool(name, description)]
    before = sim_stats.requests()
    seen = [caller.chat(messages, tools=tools) for _ in range(2)]
    assert [(s.status, s.cache) for s in seen] == [(200, label) for label in labels]
    assert sim_stats.requests() - before == upstream
    assert seen[1].content == seen[0].content
