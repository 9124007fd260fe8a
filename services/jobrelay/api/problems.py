"""RFC 9457 problem+json bodies with a stable ``type`` and ``code`` for every error."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobrelay.api import routing
from jobrelay.api.context import context_of
from jobrelay.core.errors import (
    BrokerUnavailable,
    DuplicateJob,
    Forbidden,
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    InvalidCursor,
    InvalidPayload,
    InvalidPolicy,
    InvalidSchedule,
    JobFinished,
    JobNotFound,
    JobTypeNotFound,
    NotCancellable,
    NotReplayable,
    QueueNotFound,
    RateLimited,
    RequestError,
    SignalTooLarge,
    StoreUnavailable,
    Throttled,
    TypeNotAllowed,
    Unauthorized,
    UnknownJobType,
)
from jobrelay.core.workflows import InvalidWorkflow, WorkflowNotFound

PROBLEM_TYPE_BASE = "https://jobrelay.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"

log = logging.getLogger("jobrelay.api")

# The HTTP status of each of the core's request errors (the core knows nothing of HTTP);
# tests/unit/test_problems.py checks that every request error has one.
STATUSES: dict[type[RequestError], int] = {
    IdempotencyKeyInvalid: 400,
    IdempotencyKeyMissing: 400,
    InvalidCursor: 400,
    Unauthorized: 401,
    Forbidden: 403,
    TypeNotAllowed: 403,
    JobNotFound: 404,
    WorkflowNotFound: 404,
    QueueNotFound: 404,
    JobTypeNotFound: 404,
    IdempotencyConflict: 409,
    NotCancellable: 409,
    NotReplayable: 409,
    JobFinished: 409,
    SignalTooLarge: 413,
    RateLimited: 429,
    Throttled: 429,
    DuplicateJob: 409,
    InvalidPolicy: 422,
    UnknownJobType: 422,
    InvalidPayload: 422,
    InvalidWorkflow: 422,
    InvalidSchedule: 422,
}


def status_of(error: RequestError) -> int:
    for kind in type(error).__mro__:
        if kind in STATUSES:
            return STATUSES[kind]
    return 400


# How long a client is asked to wait (Retry-After, whole seconds) before trying again after a
# shed request (the least of a spread, ``overloaded_retry_after``), an unreachable database or
# an unreachable broker (every 503 says it); a rate-limited one is told its own wait.
OVERLOADED_RETRY_AFTER = 1
# Under uvicorn's keep-alive timeout (5 s): a shed client finds its connection still open.
OVERLOADED_RETRY_AFTER_MOST = 4
DATABASE_RETRY_AFTER = 2
BROKER_RETRY_AFTER = 5


def retry_after(seconds: float) -> dict[str, str]:
    """The Retry-After header: whole seconds (RFC 9110), rounded up, at least 1."""
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def overloaded_retry_after(overload: float, draw: Callable[[], float] = random.random) -> int:
    """Whole seconds drawn evenly from 1 to ``1 + ceil(overload)`` (at most
    ``OVERLOADED_RETRY_AFTER_MOST``), for a request shed by a worker whose queue would have
    kept it ``overload`` times its bound (1 when it waited the bound out).

    Told one same number, the clients a burst got shed come back in the same second, as a
    burst again; spread, about ``1 / (1 + ceil(overload))`` of them come back each second. The
    further over the bound, the more clients are shed per second and the longer the queue takes
    to drain, so the wider the spread. ``draw``: a number in [0, 1) (tests pass their own).
    """
    most = min(OVERLOADED_RETRY_AFTER_MOST, OVERLOADED_RETRY_AFTER + math.ceil(max(overload, 1)))
    spread = most - OVERLOADED_RETRY_AFTER + 1
    return OVERLOADED_RETRY_AFTER + min(spread - 1, int(draw() * spread))


def problem(
    status: int,
    code: str,
    title: str,
    detail: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = problem_document(status, code, title, detail, **extra)
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_CONTENT_TYPE, headers=headers)


def problem_document(
    status: int, code: str, title: str, detail: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The problem+json body itself (a batch answers one per failed item)."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "code": code,
    }
    if detail:
        body["detail"] = detail
    body.update(extra)
    return body


def request_error_document(error: RequestError) -> dict[str, Any]:
    return problem_document(status_of(error), error.code, error.title, error.detail, **error.extra)


def validation_errors(error: RequestValidationError | ValidationError) -> list[dict[str, Any]]:
    # Only where and what: pydantic's "input" may echo a payload or a secret.
    return [
        {
            "loc": [str(part) for part in item.get("loc", ())],
            "msg": item.get("msg", ""),
            "type": item.get("type", ""),
        }
        for item in error.errors()
    ]


async def on_request_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestError)
    headers = None
    if isinstance(error, RateLimited):
        context_of(request).metrics.shed("rate_limited").inc()
        headers = retry_after(error.retry_after_seconds)
    elif isinstance(error, Throttled):
        headers = retry_after(error.retry_after_seconds)
    return problem(
        status_of(error), error.code, error.title, error.detail, headers=headers, **error.extra
    )


async def on_validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    errors = validation_errors(error)
    if any(item["type"] == "json_invalid" for item in errors):
        return problem(400, "malformed_json", "The request body is not valid JSON")
    # The header is required in the document; its own 400 codes say what is wrong with it.
    key_errors = [item for item in errors if item["loc"] == ["header", "idempotency-key"]]
    if key_errors:
        missing = any(item["type"] == "missing" for item in key_errors)
        key_error = IdempotencyKeyMissing() if missing else IdempotencyKeyInvalid()
        return problem(status_of(key_error), key_error.code, key_error.title)
    return problem(422, "validation_error", "The request is not valid", errors=errors)


async def on_http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    # FastAPI raises a bare 400 when it cannot parse a body at all (e.g. nested too deep).
    codes = {
        400: "malformed_json",
        404: "not_found",
        405: "method_not_allowed",
        413: "payload_too_large",
    }
    code = codes.get(error.status_code, f"http_{error.status_code}")
    # The exception's own headers are part of the answer (a 405's Allow, RFC 9110).
    headers = dict(error.headers or {})
    if error.status_code == 405:
        headers["Allow"] = ", ".join(routing.allowed_methods(request.scope))
    return problem(error.status_code, code, str(error.detail), headers=headers or None)


async def on_store_unavailable(request: Request, error: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", error)
    context_of(request).metrics.shed("database_unavailable").inc()
    return problem(
        503,
        "database_unavailable",
        "The database is unavailable; retry with the same key",
        headers=retry_after(DATABASE_RETRY_AFTER),
    )


async def on_broker_unavailable(request: Request, error: Exception) -> JSONResponse:
    log.warning("broker unavailable: %s", error)
    return problem(
        503,
        "broker_unavailable",
        "The broker is unavailable; try again later",
        headers=retry_after(BROKER_RETRY_AFTER),
    )


async def on_unexpected_error(request: Request, error: Exception) -> JSONResponse:
    # The class name only: exception texts may carry payload fragments or DSNs.
    log.error(
        "unexpected error on %s %s: %s", request.method, request.url.path, type(error).__name__
    )
    return problem(
        500, "internal_error", "Internal error; nothing was changed unless a 2xx was sent"
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestError, on_request_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(StoreUnavailable, on_store_unavailable)
    app.add_exception_handler(BrokerUnavailable, on_broker_unavailable)
    app.add_exception_handler(Exception, on_unexpected_error)
