"""`ConfigModel`: the base of every configuration model, which never crosses numbers and booleans.

pydantic's lax mode reads `true` as 1 where a number is expected (`request_timeout_s: true` was
a one-second timeout) and 1, 0, "yes" or "off" as booleans. A field of such a model refuses
both, naming the field, before pydantic converts anything. What operators legitimately write
still passes: an int for a float, and text holding a number (a quoted `"${TIMEOUT}"`: `${NAME}`
is replaced in the text before YAML reads it, so an unquoted one is already a YAML number or
boolean, and a quoted one is a string), or `"true"`/`"false"` for a boolean. A field that
takes certain numbers only (`version: 1`, a `Literal[1]`) takes them as text too (`"1"`):
pydantic compares a literal's text with its numbers as they are, so `version: "1"` was refused
where `"30"` passed for any other number. Checked only when
a model is validated (loading a config, reading telemetry settings from the environment),
never per request.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from itertools import repeat
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

_BOOLEAN_TEXT = frozenset({"true", "false"})


def _kind(annotation: Any) -> str | None:
    """"number" or "boolean" when a field of this type holds one of them (or None), else
    None; containers are looked into by `_crossed`."""
    if annotation is bool:
        return "boolean"
    if annotation in (int, float):
        return "number"
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "number"
    return None


def _crossed(annotation: Any, value: Any) -> str | None:
    """Why `value` is refused for a field of type `annotation`, or None."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # `float | None`: as `float`
        present = [arg for arg in args if arg is not type(None)]
        return _crossed(present[0], value) if len(present) == 1 else None
    if origin in (tuple, list, frozenset, set) and args and isinstance(value, list | tuple):
        fixed = origin is tuple and Ellipsis not in args  # `tuple[float, float]`
        return _first(zip(args if fixed else repeat(args[0]), value, strict=False))
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return _first((args[1], item) for item in value.values())
    kind = _kind(annotation)
    if kind == "number" and isinstance(value, bool):
        return f"expected a number, not the boolean {str(value).lower()}"
    if kind == "boolean" and not isinstance(value, bool):
        if isinstance(value, int | float):
            return "expected true or false, not a number"
        if isinstance(value, str) and value.lower() not in _BOOLEAN_TEXT:
            return "expected true or false, not other text"
    return None  # anything else is pydantic's to judge


def _literal_number(annotation: Any, value: Any) -> Any:
    """`value` read as the number a field of literal numbers takes when it is that number's
    text (`"1"` for `Literal[1]`), else `value` as it is (pydantic judges it)."""
    if isinstance(value, str) and typing.get_origin(annotation) is Literal \
            and _kind(annotation) == "number":
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _first(pairs: Iterable[tuple[Any, Any]]) -> str | None:
    return next((why for arg, item in pairs if (why := _crossed(arg, item)) is not None), None)


class ConfigModel(BaseModel):
    """A configuration model: numbers and booleans are not read as one another."""

    @model_validator(mode="wrap")
    @classmethod
    def _numbers_and_booleans_stay_apart(cls, data: Any, handler: Any) -> Any:
        """Every crossed field of the mapping, each at its own location, beside every other
        problem of the model: the rest is validated without the crossed fields (what that leaves
        missing in this model is no problem of its own). Raising before validation hid the others,
        in that model and every one under it, until the crossed one was mended. (A model
        validator, not a field validator for "*": pydantic allows none before a discriminator
        field.)"""
        if not isinstance(data, dict):
            return handler(data)
        data = {name: _literal_number(cls.model_fields[name].annotation, value)
                if name in cls.model_fields else value for name, value in data.items()}
        crossed = {name: why for name, value in data.items() if name in cls.model_fields
                   and (why := _crossed(cls.model_fields[name].annotation, value)) is not None}
        if not crossed:
            return handler(data)
        problems = [InitErrorDetails(type=PydanticCustomError("number_boolean_crossed", why),
                                     loc=(name,), input=data[name])
                    for name, why in crossed.items()]
        try:
            handler({name: value for name, value in data.items() if name not in crossed})
        except ValidationError as exc:
            # A field found missing in this very model may be one the crossed field stood for
            # (a metric's `kind` is read from its `range`): a consequence, not a problem.
            problems += [_details(error) for error in exc.errors()
                         if not (error["type"] == "missing" and len(error["loc"]) == 1)]
        raise ValidationError.from_exception_data(cls.__name__, problems)


_PYDANTIC_ERROR_TYPES = frozenset(typing.get_args(ErrorType))


def _details(error: Any) -> InitErrorDetails:
    """A validation error as pydantic reports it, again as the details it is raised from (one
    of pydantic's own types with its context, or a custom one, ours, with its message)."""
    if error["type"] not in _PYDANTIC_ERROR_TYPES:
        return InitErrorDetails(type=PydanticCustomError(error["type"], error["msg"]),
                                loc=error["loc"], input=error["input"])
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details
