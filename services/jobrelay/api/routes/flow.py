"""``/v1/admin/queues``, ``/v1/admin/limits`` and ``/v1/admin/sequences``: the work queues with
their figures, pause and resume, the limits in force with their runtime overrides, and the
sequences with jobs waiting (docs/flow-control.md); admin clients only, like the rest of
``/v1/admin``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from jobrelay.api import openapi
from jobrelay.api.context import context_of
from jobrelay.api.deps import ADMIN_PROBLEMS, AdminDep, StoreDep
from jobrelay.api.openapi import PROBLEM_CONTENT, problem_responses
from jobrelay.api.schemas import (
    NO_NUL,
    LimitList,
    LimitView,
    QueueList,
    QueueView,
    SequenceList,
    SequencesQuery,
    SetLimit,
)
from jobrelay.core.bounds import TYPE_NAME_MAX
from jobrelay.core.errors import JobTypeNotFound, QueueNotFound
from jobrelay.core.queues import QUEUE_NAME_MAX, QueuesReport
from jobrelay.core.registry import Registry
from jobrelay.core.runtime_limits import limit_document
from jobrelay.core.settings import parse_type_queues
from jobrelay.db.flow_store import FlowStore
from jobrelay.db.sequence_store import SequenceStore

router = APIRouter(route_class=openapi.JsonBodyRoute, responses=ADMIN_PROBLEMS, tags=["admin"])

QueueName = Annotated[str, Path(min_length=1, max_length=QUEUE_NAME_MAX, pattern=NO_NUL)]
TypeName = Annotated[str, Path(min_length=1, max_length=TYPE_NAME_MAX, pattern=NO_NUL)]
# Their own 404s (the shared one is a job's), still the one Problem component.
QUEUE_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "queue_not_found: no such queue (every consumer registers its own)",
        "content": PROBLEM_CONTENT,
    }
}
TYPE_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "job_type_not_found: a type neither in this API's registry "
        "(JOBRELAY_HANDLERS), nor registered by a consumer, nor with a runtime limit",
        "content": PROBLEM_CONTENT,
    }
}


async def queues_report(request: Request, store: StoreDep) -> QueuesReport:
    context = context_of(request)
    probe = context.broker_probe  # the API's kept connection
    routes = parse_type_queues(context.settings.type_queues)
    return await FlowStore(store).queues_report(routes, probe.queue_depths)


async def queue_view(request: Request, store: StoreDep, name: str) -> dict[str, Any]:
    report = await queues_report(request, store)
    queue = report.find(name)
    if queue is None:  # deleted meanwhile: as unknown as one never made
        raise QueueNotFound(f"no queue named {name!r}")
    return report.queue_document(queue)


def unknown_type(job_type: str) -> str:
    return f"no job type {job_type!r} in this API's registry or registered by a consumer"


def registry_of(request: Request) -> Registry:
    return context_of(request).registry


@router.get(
    "/v1/admin/queues",
    operation_id="listQueues",
    response_model=QueueList,
    summary="The work queues: paused or not, backlog in the outbox, window in use, running "
    "jobs, consumers",
)
async def list_queues(request: Request, admin: AdminDep, store: StoreDep) -> dict[str, Any]:
    return (await queues_report(request, store)).as_document()


@router.post(
    "/v1/admin/queues/{name}/pause",
    operation_id="pauseQueue",
    response_model=QueueView,
    responses={**QUEUE_NOT_FOUND, **problem_responses(413, 422)},
    summary="Pause a queue: once answered, none of its jobs is claimed or published until it "
    "is resumed (jobs are still accepted; those running finish)",
)
async def pause_queue(
    request: Request, name: QueueName, admin: AdminDep, store: StoreDep
) -> dict[str, Any]:
    if not await FlowStore(store).pause_queue(name, by=admin.name):
        raise QueueNotFound(f"no queue named {name!r}")
    return await queue_view(request, store, name)


@router.post(
    "/v1/admin/queues/{name}/resume",
    operation_id="resumeQueue",
    response_model=QueueView,
    responses={**QUEUE_NOT_FOUND, **problem_responses(413, 422)},
    summary="Resume a paused queue",
)
async def resume_queue(
    request: Request, name: QueueName, admin: AdminDep, store: StoreDep
) -> dict[str, Any]:
    if not await FlowStore(store).resume_queue(name):
        raise QueueNotFound(f"no queue named {name!r}")
    return await queue_view(request, store, name)


@router.get(
    "/v1/admin/limits",
    operation_id="listLimits",
    response_model=LimitList,
    summary="Every type with a limit in force: the code's, or a runtime override",
)
async def list_limits(request: Request, admin: AdminDep, store: StoreDep) -> dict[str, Any]:
    limits = await FlowStore(store).limits_in_force(registry_of(request))
    return {"limits": [limit_document(limit) for limit in limits]}


@router.get(
    "/v1/admin/limits/{job_type}",
    operation_id="getLimit",
    response_model=LimitView,
    responses={**TYPE_NOT_FOUND, **problem_responses(422)},
    summary="The limit in force for a type (no limit: nulls, from the code)",
)
async def get_limit(
    request: Request, job_type: TypeName, admin: AdminDep, store: StoreDep
) -> dict[str, Any]:
    registry = registry_of(request)
    flow = FlowStore(store)
    if (
        not await flow.is_known_type(job_type, registry)
        and await flow.runtime_limit(job_type) is None
    ):
        raise JobTypeNotFound(unknown_type(job_type))
    return limit_document(await flow.limit_in_force(job_type, registry))


@router.put(
    "/v1/admin/limits/{job_type}",
    operation_id="setLimit",
    response_model=LimitView,
    responses={**TYPE_NOT_FOUND, **problem_responses(413, 422)},
    summary="Set a type's runtime limit (in force within seconds on every dispatcher and "
    "consumer, until cleared) and throttle (on every API process at once)",
)
async def set_limit(
    request: Request, job_type: TypeName, body: SetLimit, admin: AdminDep, store: StoreDep
) -> dict[str, Any]:
    registry = registry_of(request)
    flow = FlowStore(store)
    if not await flow.is_known_type(job_type, registry):
        raise JobTypeNotFound(unknown_type(job_type))
    await flow.set_limit(job_type, body.as_limit(), body.as_throttle(), registry=registry)
    return limit_document(await flow.limit_in_force(job_type, registry))


@router.delete(
    "/v1/admin/limits/{job_type}",
    operation_id="clearLimit",
    status_code=204,
    response_class=Response,
    responses={
        204: {"description": "Cleared: the code's limit is in force again"},
        **TYPE_NOT_FOUND,
        **problem_responses(422),
    },
    summary="Clear a type's runtime limit: back to the code's",
)
async def clear_limit(
    request: Request, job_type: TypeName, admin: AdminDep, store: StoreDep
) -> Response:
    flow = FlowStore(store)
    cleared = await flow.clear_limit(job_type)
    if not cleared and not await flow.is_known_type(job_type, registry_of(request)):
        raise JobTypeNotFound(unknown_type(job_type))
    return Response(status_code=204)


@router.get(
    "/v1/admin/sequences",
    operation_id="listSequences",
    response_model=SequenceList,
    responses=problem_responses(422),
    summary="The sequences with jobs waiting in line: blocked by a quarantined job or not "
    "(?blocked=true: the blocked ones only)",
)
async def list_sequences(
    admin: AdminDep, store: StoreDep, wanted: Annotated[SequencesQuery, Query()]
) -> dict[str, Any]:
    listed = await SequenceStore(store).waiting(blocked=wanted.blocked, limit=wanted.limit)
    return {"sequences": [sequence.as_document() for sequence in listed]}
