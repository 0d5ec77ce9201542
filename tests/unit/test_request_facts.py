"""What routing reads of a request: its prompt size, its needs and its hints."""

from __future__ import annotations

import pytest

from router.api.schemas import ChatCompletionRequest
from router.caching import data_version_of
from router.classify.types import Labels
from router.errors import RequestError
from router.pipeline import header_or_metadata, hints_from, request_facts, request_view

SCHEMA = {"type": "object", "properties": {f"field_{i}": {
    "type": "string", "description": "a parameter the model must fill in " * 3}
    for i in range(60)}}


def _facts(body: dict[str, object]) -> tuple[int, bool]:
    request = ChatCompletionRequest.model_validate({"model": "auto", **body})
    facts = request_facts(request, request_view(request), Labels(task="chat", risk="low"))
    return facts.prompt_tokens, facts.needs_tools


def test_the_prompt_estimate_counts_tool_schemas_tool_calls_and_media() -> None:
    """A short message with a large tool schema is a large prompt (the schema was left out:
    11 tokens estimated, 3,575 counted by the provider); so are earlier tool calls and
    images."""
    hi = [{"role": "user", "content": "hi"}]
    bare, _ = _facts({"messages": hi})
    tool = {"type": "function", "function": {"name": "fill", "parameters": SCHEMA}}
    with_schema, needs = _facts({"messages": hi, "tools": [tool]})
    called, _ = _facts({"messages": [*hi, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "fill",
                                                      "arguments": "x" * 4000}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})
    image, _ = _facts({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
    assert bare < 20 and needs
    assert with_schema > 1500 and called > 1000 and image > 700


def test_legacy_functions_need_a_deployment_with_tools() -> None:
    """OpenAI's older `functions` field asks for tools as `tools` does (and counts)."""
    tokens, needs = _facts({"messages": [{"role": "user", "content": "hi"}], "functions": [
        {"name": "fill", "description": "fills a form", "parameters": SCHEMA}]})
    assert needs and tokens > 1500


@pytest.mark.parametrize(("headers", "metadata", "param"), [
    ({"x-slorouter-task": "coding"}, {}, "x-slorouter-task"),
    ({"x-slorouter-risk": "extreme"}, {}, "x-slorouter-risk"),
])
def test_a_bad_hint_names_where_it_came_from(headers: dict[str, str], metadata: dict[str, str],
                                             param: str) -> None:
    request = ChatCompletionRequest.model_validate({
        "model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": metadata})
    with pytest.raises(RequestError) as caught:
        hints_from(request, headers)
    assert caught.value.param == param and caught.value.code == "invalid_hint"


@pytest.mark.parametrize("metadata", [{"task": "ticket-triage"}, {"risk": "none"},
                                      {"task": "coding", "risk": "extreme", "team": "a"}])
def test_metadata_that_names_no_task_or_risk_is_the_clients_own_tags(
        metadata: dict[str, str]) -> None:
    """OpenAI's `metadata` is free-form: an app tagging requests `{"task": "ticket-triage"}`
    must not get a 400, nor a hint; the header, slorouter's own, stays strict."""
    assert _hints({}, metadata) == (None, None)
    assert _hints({"x-slorouter-task": "code"}, metadata)[0] == "code"  # no conflict either


def _hints(headers: dict[str, str], metadata: dict[str, str]) -> tuple[str | None, str | None]:
    request = ChatCompletionRequest.model_validate({
        "model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": metadata})
    hints = hints_from(request, headers)
    return hints.task, hints.risk


@pytest.mark.parametrize("name", ["task", "risk"])
def test_a_header_and_metadata_hint_that_disagree_are_a_400_naming_both(name: str) -> None:
    """Neither place silently wins: a client sending two different values for one hint gets
    told, with both values, rather than routed on one it may not have meant."""
    values = {"task": ("code", "math"), "risk": ("high", "low")}[name]
    request = ChatCompletionRequest.model_validate({
        "model": "auto", "messages": [{"role": "user", "content": "hi"}],
        "metadata": {name: values[1]}})
    with pytest.raises(RequestError) as caught:
        hints_from(request, {f"x-slorouter-{name}": values[0]})
    error = caught.value
    assert error.status_code == 400 and error.code == "conflicting_hint"
    assert error.param == f"metadata.{name}"
    assert f"x-slorouter-{name}" in error.message and f"metadata.{name}" in error.message
    assert repr(values[0]) in error.message and repr(values[1]) in error.message


def test_a_hint_may_come_from_either_place_or_both_when_they_agree() -> None:
    """Header alone, metadata alone, or the same value in both: that value is the hint."""
    assert _hints({"x-slorouter-task": "code", "x-slorouter-risk": "high"}, {}) == ("code", "high")
    assert _hints({}, {"task": "code", "risk": "high"}) == ("code", "high")
    assert _hints({"x-slorouter-task": "code", "x-slorouter-risk": "high"},
                  {"task": "code", "risk": "high"}) == ("code", "high")
    assert _hints({"x-slorouter-task": "code"}, {"risk": "medium"}) == ("code", "medium")


def test_a_data_version_comes_from_either_place_and_a_conflict_is_a_400() -> None:
    """`x-slorouter-data-version` or `metadata.data_version` (the same value in both is fine);
    two different versions are refused rather than one silently winning."""
    header = {"x-slorouter-data-version": "docs-1"}
    assert data_version_of(header, None) == "docs-1"
    assert data_version_of({}, {"data_version": "docs-1"}) == "docs-1"
    assert data_version_of(header, {"data_version": "docs-1"}) == "docs-1"
    assert data_version_of({}, {"task": "code"}) is None
    with pytest.raises(RequestError) as caught:
        data_version_of(header, {"data_version": "docs-2"})
    error = caught.value
    assert (error.status_code, error.code, error.param) == (
        400, "conflicting_data_version", "metadata.data_version")
    assert "'docs-1'" in error.message and "'docs-2'" in error.message


def test_a_session_from_header_and_metadata_must_agree() -> None:
    """The experiment unit `session` from `x-slorouter-session` or `metadata.session_id`: two
    different sessions would put the request in an arm picked from one of them silently."""
    header = {"x-slorouter-session": "s-1"}
    assert header_or_metadata(header, "x-slorouter-session", {"session_id": "s-1"},
                              "session_id", "sessions", "conflicting_session") == "s-1"
    with pytest.raises(RequestError) as caught:
        header_or_metadata(header, "x-slorouter-session", {"session_id": "s-2"}, "session_id",
                           "sessions", "conflicting_session")
    assert (caught.value.code, caught.value.param) == ("conflicting_session",
                                                       "metadata.session_id")
