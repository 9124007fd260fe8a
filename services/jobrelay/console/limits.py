"""The limits in force per job type (the code's and the runtime overrides, as
``GET /v1/admin/limits`` and ``jobrelay limits list`` show them), with a form that sets a
type's runtime limit and a button that clears it, checked as the API and the CLI check them
(``core/runtime_limits.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from jobrelay.console.context import context_of
from jobrelay.console.security import Flash
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    OperatorDep,
    redirect,
    render,
    store_of,
)
from jobrelay.core.bounds import TYPE_NAME_MAX
from jobrelay.core.registry import Registry
from jobrelay.core.runtime_limits import (
    check_throttle,
    limit_document,
    limit_line,
    runtime_limit,
)
from jobrelay.db.flow_store import FlowStore

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

LIMITS_PATH = "/ui/limits"
TypeName = Annotated[str, Form(max_length=TYPE_NAME_MAX)]
Optional = Annotated[str, Form(max_length=50)]


def registry_of(request: Request) -> Registry:
    registry = context_of(request).registry
    return registry


@router.get(LIMITS_PATH)
async def limits_page(request: Request, operator: OperatorDep) -> Response:
    registry = registry_of(request)
    limits = await FlowStore(store_of(request)).limits_in_force(registry)
    context = {
        "limits": [limit_document(limit) for limit in limits],
        "types": sorted(registry.types),
    }
    return await render(request, "limits.html", context, operator=operator)


def _whole(text: str) -> int | None:
    """The concurrency field: empty is none."""
    if not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the concurrency {text.strip()!r} is not a whole number") from None


def _unknown(job_type: str) -> Flash:
    return Flash(
        "error",
        f"Not set: {job_type!r} is neither a job type of this API's registry nor one a "
        "consumer registered.",
    )


@router.post(LIMITS_PATH)
async def set_limit(
    request: Request,
    operator: ActingDep,
    job_type: TypeName,
    concurrency: Optional = "",
    rate: Optional = "",
    per_key: Annotated[bool, Form()] = False,
    throttle: Optional = "",
) -> Response:
    registry = registry_of(request)
    flow = FlowStore(store_of(request))
    if not await flow.is_known_type(job_type, registry):
        return await redirect(request, LIMITS_PATH, _unknown(job_type))
    try:
        limit = runtime_limit(_whole(concurrency), rate.strip() or None, per_key)
        throttled = check_throttle(throttle.strip() or None)
    except ValueError as error:
        return await redirect(request, LIMITS_PATH, Flash("error", f"Not set: {error}."))
    if limit.concurrency is None and limit.rate is None and throttled is None:
        text = (
            "Not set: give a concurrency, a rate and/or a throttle (Clear goes back to the "
            "code's limit)."
        )
        return await redirect(request, LIMITS_PATH, Flash("error", text))
    await flow.set_limit(job_type, limit, throttled, registry=registry)
    in_force = await flow.limit_in_force(job_type, registry)
    said = "in force within seconds on every consumer"
    if throttled is not None:
        said += ", the throttle at once on every API process"
    text = f"Set: {limit_line(in_force)}, {said}."
    return await redirect(request, LIMITS_PATH, Flash("ok", text))


@router.post(LIMITS_PATH + "/clear")
async def clear_limit(request: Request, operator: ActingDep, job_type: TypeName) -> Response:
    registry = registry_of(request)
    flow = FlowStore(store_of(request))
    if not await flow.clear_limit(job_type):
        return await redirect(
            request, LIMITS_PATH, Flash("error", f"{job_type!r} has no runtime limit to clear.")
        )
    in_force = await flow.limit_in_force(job_type, registry)
    return await redirect(request, LIMITS_PATH, Flash("ok", f"Cleared: {limit_line(in_force)}."))
