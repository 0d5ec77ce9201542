"""Build a `RequestView` from OpenAI chat-completions wire dicts.

Only the translation from wire format (messages, tools, response_format) to the classifier's
frozen view lives here; validation of the whole request body belongs to the HTTP layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from router.classify.detectors import visible
from router.classify.types import RequestView
from router.errors import RequestError

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_FORMATS = frozenset({"text", "json_object", "json_schema"})


def content_text(content: object, where: str) -> str:
    """The text of one message `content`: a string, a list of parts, or None.

    Text parts are joined with newlines; image, audio and file parts are left out.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, Mapping):
                raise RequestError(f"{where}.content[{i}] must be an object", param=where)
            if part.get("type") in _TEXT_PART_TYPES:
                text = part.get("text")
                if not isinstance(text, str):
                    raise RequestError(f"{where}.content[{i}].text must be a string", param=where)
                texts.append(text)
        return "\n".join(texts)
    raise RequestError(f"{where}.content must be a string, a list of parts or null", param=where)


def _messages(messages: Sequence[object]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise RequestError(f"{where} must be an object", param="messages")
        role = message.get("role")
        if not isinstance(role, str):
            raise RequestError(f"{where}.role must be a string", param="messages")
        out.append((role, content_text(message.get("content"), where)))
    return tuple(out)


def _tools(tools: Sequence[object] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names: list[str] = []
    descriptions: list[str] = []
    for i, tool in enumerate(tools if tools is not None else ()):
        if not isinstance(tool, Mapping):
            raise RequestError(f"tools[{i}] must be an object", param="tools")
        function = tool.get("function")
        spec = function if isinstance(function, Mapping) else tool
        name = spec.get("name")
        if not isinstance(name, str):
            raise RequestError(f"tools[{i}] has no function name", param="tools")
        description = spec.get("description")
        # Read as the messages are, without invisible characters: `del\u200bete_user` hid its
        # verb from the side-effect rule and its words from the model.
        names.append(visible(name))
        descriptions.append(visible(description) if isinstance(description, str) else "")
    return tuple(names), tuple(descriptions)


def _format(response_format: Mapping[str, object] | None) -> str | None:
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind not in _FORMATS:
        raise RequestError(
            f"response_format.type must be one of {sorted(_FORMATS)}", param="response_format"
        )
    return str(kind)


def view_from_openai(
    messages: list[dict[str, object]],
    tools: list[dict[str, object]] | None = None,
    response_format: dict[str, object] | None = None,
) -> RequestView:
    """The classifier's view of an OpenAI chat request (raises `RequestError` when malformed)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        raise RequestError("messages must be a list", param="messages")
    names, descriptions = _tools(tools)
    return RequestView(
        messages=_messages(messages),
        tool_names=names,
        tool_descriptions=descriptions,
        response_format=_format(response_format),
    )
