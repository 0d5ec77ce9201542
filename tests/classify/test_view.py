"""Building the classifier's view from OpenAI wire dicts."""

from __future__ import annotations

import pytest

from router.classify import view_from_openai
from router.errors import RequestError


def test_string_and_part_list_contents_become_text() -> None:
    """String content is kept; text parts are joined by newlines and images dropped."""
    view = view_from_openai(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "describe"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                    {"type": "text", "text": "this"},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": []},
        ]
    )
    assert view.messages == (("system", "be brief"), ("user", "describe\nthis"), ("assistant", ""))


def test_tools_and_response_format_are_read() -> None:
    """Function names, descriptions and the response format type are kept."""
    view = view_from_openai(
        [{"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "send_email", "description": "Sends"}}],
        response_format={"type": "json_object"},
    )
    assert view.tool_names == ("send_email",)
    assert view.tool_descriptions == ("Sends",)
    assert view.response_format == "json_object"


@pytest.mark.parametrize(
    ("messages", "tools", "fmt", "fragment"),
    [
        (["hello"], None, None, "messages[0] must be an object"),
        ([{"content": "x"}], None, None, "messages[0].role"),
        ([{"role": "user", "content": 3}], None, None, "messages[0].content"),
        ([{"role": "user", "content": [{"type": "text"}]}], None, None, "content[0].text"),
        ([{"role": "user", "content": "x"}], [{"type": "function"}], None, "tools[0]"),
        ([{"role": "user", "content": "x"}], None, {"type": "xml"}, "response_format"),
    ],
)
def test_malformed_wire_dicts_raise_request_errors(
    messages: list[object],
    tools: list[object] | None,
    fmt: dict[str, object] | None,
    fragment: str,
) -> None:
    """Malformed messages, tools or formats give a 400 naming the offending field."""
    with pytest.raises(RequestError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        view_from_openai(messages, tools, fmt)  # type: ignore[arg-type]
