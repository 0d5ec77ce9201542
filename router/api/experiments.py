"""`POST /v1/feedback` (quality of an answer, for its experiment arm) and `GET /v1/experiments`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from router.api.body import authorization_header, read_json, validation_error
from router.api.errors import error_response
from router.auth import OPERATOR_SCOPE, authenticate, require_scope
from router.experimentation import Experiments
from router.runtime_config import RuntimeConfig

Endpoint = Callable[[Request], Awaitable[Response]]


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=128)
    metric: str = Field(min_length=1, max_length=64)
    value: StrictFloat  # a JSON number: "5" and true are refused, as in the chat schema


def feedback_endpoint(experiments: Experiments, config: RuntimeConfig) -> Endpoint:
    async def feedback(request: Request) -> Response:
        try:
            principal = authenticate(authorization_header(request.scope["headers"]),
                                     config.principals)
            raw = await read_json(request, 64 * 1024, config.request_timeout_s)
            try:
                body = FeedbackBody.model_validate(raw)
            except ValidationError as exc:  # worded and coded as a chat request's would be
                raise validation_error(exc, raw) from None
            result = await experiments.feedback(principal.tenant, body.request_id, body.metric,
                                                body.value)
        except Exception as exc:
            return error_response(exc)
        return Response(orjson.dumps(result), media_type="application/json")

    return feedback


def experiments_endpoint(experiments: Experiments, config: RuntimeConfig) -> Endpoint:
    async def report(request: Request) -> Response:
        try:
            principal = authenticate(authorization_header(request.scope["headers"]),
                                     config.principals)
            # Reports aggregate every tenant's requests and feedback: an operator's reading.
            require_scope(principal, OPERATOR_SCOPE, "GET /v1/experiments", config.principals)
            reports = await experiments.reports(request.query_params.get("name"))
        except Exception as exc:
            return error_response(exc)
        return Response(orjson.dumps({"object": "list", "data": reports}),
                        media_type="application/json")

    return report
