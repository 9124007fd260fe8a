"""What the OpenAPI document says beyond the routes' own declarations.

- The problems each operation can answer, by status (``problem_responses``), each one a
  ``application/problem+json`` body.
- Routes with a JSON body answer ``415 unsupported_media_type`` to a body not declared JSON
  (``JsonBodyRoute``), and say so.
- The submission body documented per registered job type: ``payload`` is the type's own schema,
  one variant per type, told apart by ``type`` (``document_job_types``).
"""

from __future__ import annotations

import email.message
import functools
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from jobrelay.api import problems
from jobrelay.api.schemas import SUBMISSION_OPTIONS, BatchItem, Problem
from jobrelay.core.registry import Registry

# A tag per resource; every operation has one, and an id of its own (``operation_id=``).
TAGS = [
    {"name": "jobs", "description": "Submit, list, read, trace and cancel your own jobs"},
    {
        "name": "workflows",
        "description": "Submit, read and cancel your own workflows: jobs that wait for other "
        "jobs (docs/workflows.md)",
    },
    {
        "name": "admin",
        "description": "Stats, the quarantine, replay, any job's trace, the queues (pause, "
        "resume) and the runtime limits (admins)",
    },
    {"name": "health", "description": "Probes and metrics: public"},
]
# One schema, referenced by every error answer (``install`` puts it in the components): a copy
# inline in each answer made client generators build one class per answer, or none.
PROBLEM_REF = "#/components/schemas/Problem"
PROBLEM_CONTENT: dict[str, Any] = {problems.PROBLEM_CONTENT_TYPE: {"schema": {"$ref": PROBLEM_REF}}}
_WHEN = {
    400: "idempotency_key_missing, idempotency_key_invalid, malformed_json or invalid_cursor",
    401: "unauthorized: a missing, unknown or disabled token",
    403: "forbidden: an admin endpoint with a client's token",
    404: "job_not_found: no such job, or another client's",
    409: "idempotency_conflict, not_cancellable, not_replayable or job_finished",
    413: "payload_too_large: the body is over JOBRELAY_MAX_BODY_BYTES (a signal's over 64 KiB)",
    415: "unsupported_media_type: the body is not declared application/json",
    422: "validation_error, unknown_job_type, invalid_payload or invalid_schedule",
    429: "rate_limited: over the client's submission rate; retry after Retry-After",
    503: "overloaded, database_unavailable or broker_unavailable: retry after Retry-After "
    "(with the same Idempotency-Key)",
}
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 1},
        "description": "Seconds to wait before trying again",
    }
}
# Errors are sent as application/problem+json only: the schema goes under that media type (a
# "model" would also document an application/json body that is never sent).
PROBLEM_RESPONSES: dict[int, dict[str, Any]] = {
    status: {"description": when, "content": PROBLEM_CONTENT} for status, when in _WHEN.items()
}
PROBLEM_RESPONSES[401] = {
    **PROBLEM_RESPONSES[401],
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
}
for _status in (429, 503):
    PROBLEM_RESPONSES[_status] = {**PROBLEM_RESPONSES[_status], "headers": RETRY_AFTER_HEADER}


# A submission's 403 is another problem than an admin endpoint's (docs/submitting.md).
SUBMISSION_FORBIDDEN: dict[str, Any] = {
    "description": "type_not_allowed: a job type the client may not submit (outside its type "
    "patterns; without patterns, a Django task or an api=False type); nothing was written",
    "content": PROBLEM_CONTENT,
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entries of the problems an operation can answer."""
    return {status: PROBLEM_RESPONSES[status] for status in statuses}


def submission_problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``problem_responses`` of an operation that creates jobs: its 403 is type_not_allowed."""
    return {**problem_responses(*statuses), 403: SUBMISSION_FORBIDDEN}


# --- 415 for a body that is not declared JSON ---------------------------------------------------


@functools.lru_cache(maxsize=256)
def declares_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, parameters allowed.

    Cached: parsing the header with ``email.message`` cost more than the rest of the 415 check
    on every submission, and clients send the same few values again and again (the cache keeps
    at most 256 of them, whatever clients send).
    """
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class JsonBodyRoute(APIRoute):
    """A route that reads a JSON body refuses any other body with 415 before reading it (FastAPI
    would hand the raw bytes to validation, a 422 about a dictionary), and documents the 415."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.body_field is not None:
            self.responses = {**self.responses, 415: PROBLEM_RESPONSES[415]}

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def json_only(request: Request) -> Response:
            content_type = request.headers.get("content-type")
            if not declares_json(content_type):
                return problems.problem(
                    415,
                    "unsupported_media_type",
                    "The request body must be JSON",
                    "send the body with Content-Type: application/json"
                    if not content_type
                    else "the body is declared as something else than application/json",
                )
            return await handler(request)

        return json_only


# --- the submission body, per registered job type -----------------------------------------------

_COMPONENT_NAME = re.compile(r"[^A-Za-z0-9._-]")
REF_TEMPLATE = "#/components/schemas/{model}"


def _model_schemas(model: type[BaseModel]) -> dict[str, Any]:
    """The model's schema and those it refers to, by component name."""
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    definitions: dict[str, Any] = schema.pop("$defs", {})
    return {model.__name__: schema, **definitions}


def install(app: FastAPI, registry: Registry, *, submit_path: str = "/v1/jobs") -> None:
    """Build the document once, from the routes and then the registry the app was created
    with."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            components = document.setdefault("components", {}).setdefault("schemas", {})
            # The batch reads its items one by one (each answered alone): the document still
            # describes them, by this component.
            components["BatchItem"] = BatchItem.model_json_schema(ref_template=REF_TEMPLATE)
            for name, schema in _model_schemas(Problem).items():
                components.setdefault(name, schema)
            document_job_types(document, registry, submit_path)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def document_job_types(schema: dict[str, Any], registry: Registry, submit_path: str) -> None:
    """Replace the generic submission body (``payload``: any object) by one variant per type:
    ``{"type": <its name>, "payload": <its payload schema>, "max_attempts": …}``, a ``oneOf``
    with a discriminator on ``type``. The API still answers 422 ``unknown_job_type`` and
    ``invalid_payload`` itself, with its own codes."""
    job_types = list(registry)
    operation = schema.get("paths", {}).get(submit_path, {}).get("post")
    if not job_types or operation is None:
        return
    components: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
    generic = components.get("SubmitJob", {})
    models: list[type[BaseModel]] = []
    for job_type in job_types:
        if job_type.payload_model not in models:
            models.append(job_type.payload_model)
    refs, definitions = _payload_schemas(models, components)
    components.update(definitions)
    shared = {field: generic.get("properties", {}).get(field, {}) for field in SUBMISSION_OPTIONS}
    batch_key = components.get("BatchItem", {}).get("properties", {}).get("idempotency_key")
    variants: dict[str, str] = {}
    batch_variants: dict[str, str] = {}
    for job_type in job_types:
        model = job_type.payload_model
        name = _COMPONENT_NAME.sub("_", job_type.name)
        variant: dict[str, Any] = {
            "title": f"Submit {job_type.name}",
            "description": job_type.description or f"A {job_type.name} job",
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": job_type.name},
                "payload": refs[model],
                **shared,
            },
            "required": ["type", "payload"] if _needs_payload(model) else ["type"],
            "additionalProperties": False,
        }
        components["SubmitJob." + name] = variant
        variants[job_type.name] = f"#/components/schemas/SubmitJob.{name}"
        if batch_key is not None:
            components["BatchItem." + name] = {
                **variant,
                # Its own title: generators name a class by it, and two alike collide.
                "title": f"Batch item {job_type.name}",
                "properties": {**variant["properties"], "idempotency_key": batch_key},
                "required": [*variant["required"], "idempotency_key"],
            }
            batch_variants[job_type.name] = f"#/components/schemas/BatchItem.{name}"
    operation["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": _one_of(variants)}},
    }
    if batch_variants:
        components["BatchItem"] = _one_of(batch_variants)


def _one_of(variants: dict[str, str]) -> dict[str, Any]:
    """One of the variants, chosen by ``type``."""
    return {
        "oneOf": [{"$ref": ref} for ref in variants.values()],
        "discriminator": {"propertyName": "type", "mapping": variants},
    }


def _payload_schemas(
    models: list[type[BaseModel]], components: dict[str, Any]
) -> tuple[dict[type[BaseModel], dict[str, Any]], dict[str, Any]]:
    """Each model's reference and the definitions to add to the components; under a
    ``payload.`` prefix if a plain name would collide with a schema of the API itself."""
    for prefix in ("", "payload."):
        keys, document = models_json_schema(
            [(model, "validation") for model in models],
            ref_template=f"#/components/schemas/{prefix}{{model}}",
        )
        definitions = {prefix + key: value for key, value in document.get("$defs", {}).items()}
        if all(components.get(key, value) == value for key, value in definitions.items()):
            break
    refs = {model: keys[(model, "validation")] for model in models}
    return refs, definitions


def _needs_payload(model: type[BaseModel]) -> bool:
    try:
        model.model_validate({})
    except ValidationError:
        return True
    return False
