"""``/v1/admin``: stats, the quarantine, replay, any job's trace and cancel, the clients; admin
clients only."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic.errors import PydanticUserError

from jobrelay.api import openapi
from jobrelay.api.context import context_of
from jobrelay.api.deps import (
    ADMIN_PROBLEMS,
    JOB_PROBLEMS,
    AdminDep,
    OpsDep,
    StoreDep,
)
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import (
    CANCEL_REQUESTED,
    ClientList,
    ClientView,
    JobTypeList,
    JobTypeView,
    JobView,
    QuarantineQuery,
    QuarantineReport,
    ReconcileView,
    ReplayView,
    StatsView,
    TraceView,
)
from jobrelay.core.errors import JobNotFound, NotReplayable
from jobrelay.core.flow import Limit
from jobrelay.core.jobs import CancelAnswer
from jobrelay.core.trace import trace_document
from jobrelay.core.type_catalog import TypeCatalog
from jobrelay.db.client_store import ClientStore
from jobrelay.operations import cancel_any_job

router = APIRouter(route_class=openapi.JsonBodyRoute, responses=ADMIN_PROBLEMS, tags=["admin"])


@router.get(
    "/v1/admin/stats",
    operation_id="getStats",
    response_model=StatsView,
    summary="Jobs by state, outbox backlog, expired leases, quarantine by reason",
)
async def admin_stats(admin: AdminDep, store: StoreDep) -> dict[str, Any]:
    return (await store.stats()).as_document()


@router.get(
    "/v1/admin/quarantine",
    operation_id="listQuarantine",
    response_model=QuarantineReport,
    responses=problem_responses(422),
    summary="Quarantined jobs with their reasons and dead-lettered messages",
)
async def admin_quarantine(
    admin: AdminDep, ops: OpsDep, wanted: Annotated[QuarantineQuery, Query()]
) -> dict[str, Any]:
    return await ops.quarantine_report(code=wanted.code, limit=wanted.limit)


@router.post(
    "/v1/admin/quarantine/reconcile",
    operation_id="reconcileQuarantine",
    response_model=ReconcileView,
    responses=problem_responses(413),
    summary="Reconcile the quarantine now (the dispatcher does it by itself): jobs the "
    "broker dead-lettered become quarantined, one message per quarantined job stays",
)
async def admin_quarantine_reconcile(admin: AdminDep, ops: OpsDep) -> dict[str, Any]:
    return (await ops.reconcile_quarantine()).as_dict()


@router.post(
    "/v1/admin/jobs/{job_id}/replay",
    operation_id="replayJob",
    response_model=ReplayView,
    responses=problem_responses(404, 409, 413, 422),
    summary="Queue a quarantined job again with a fresh attempt budget",
)
async def admin_replay(
    job_id: uuid.UUID,
    admin: AdminDep,
    ops: OpsDep,
    reset_steps: Annotated[
        bool,
        Query(
            description="true: its recorded steps go in the same transaction (the signals "
            "its waits took are untaken again), so the new run runs every step again; "
            "without: the new run goes on from its recorded steps"
        ),
    ] = False,
) -> dict[str, Any]:
    (outcome,) = await ops.replay([job_id], reset_steps=reset_steps)
    if outcome.status == "not_found":
        raise JobNotFound()
    if outcome.status != "replayed":
        raise NotReplayable(f"the job is {outcome.state}", state=outcome.state)
    return outcome.as_dict()


@router.post(
    "/v1/admin/jobs/{job_id}/cancel",
    operation_id="cancelAnyJob",
    response_model=JobView,
    responses={
        200: {"description": "Cancelled: the job was queued, retrying or waiting"},
        202: CANCEL_REQUESTED,
        **problem_responses(404, 409, 413, 422),
    },
    summary="Cancel any client's job, as its owner's cancel does; the journal says an operator did",
)
async def admin_cancel(
    job_id: uuid.UUID, admin: AdminDep, store: StoreDep, response: Response
) -> JobView:
    answer, job = await cancel_any_job(
        store, job_id, how=f"through the admin API (client {admin.name})"
    )
    if answer is CancelAnswer.REQUESTED:
        response.status_code = 202
    return JobView.of(job)


@router.get(
    "/v1/admin/clients",
    operation_id="listClients",
    response_model=ClientList,
    summary="The API's clients (never a token), with the job types each may submit",
)
async def admin_clients(admin: AdminDep, store: StoreDep) -> ClientList:
    listed = await ClientStore(store).list_clients()
    return ClientList(clients=[ClientView.of(client) for client in listed])


@router.get(
    "/v1/admin/jobs/{job_id}/trace",
    operation_id="getAnyJobTrace",
    response_model=TraceView,
    responses=JOB_PROBLEMS,
    summary="What happened to any job: intent, publishing, deliveries, attempts, result",
)
async def admin_trace(job_id: uuid.UUID, admin: AdminDep, store: StoreDep) -> dict[str, Any]:
    trace = await store.trace(job_id)
    if trace is None:
        raise JobNotFound()
    return trace_document(trace)


@router.get(
    "/v1/admin/types",
    operation_id="listJobTypes",
    response_model=JobTypeList,
    summary="The job types the API accepts: those whose handlers it loads, and those the "
    "consumers registered (docs/job-types.md)",
)
async def list_job_types(request: Request, admin: AdminDep) -> JobTypeList:
    types = context_of(request).types
    catalog = await types.reload()  # the database's rows as they are now, for the operator
    return JobTypeList(types=[type_view(catalog, name) for name in catalog.names()])


def type_view(catalog: TypeCatalog, name: str) -> JobTypeView:
    """Type ``name`` as the API validates it: loaded handlers first; who registered it, if any
    consumer did, either way."""
    registered = catalog.registered.get(name)
    by = {
        "registered_by": registered.registered_by if registered else None,
        "registered_at": registered.registered_at if registered else None,
    }
    loaded = catalog.registry.types.get(name)
    if loaded is None:
        assert registered is not None  # a name of the catalog is one or the other
        return JobTypeView(
            name=name,
            source="registered",
            description=registered.description,
            max_attempts=registered.max_attempts,
            priority=registered.priority,
            timeout_seconds=registered.timeout_seconds,
            **_limit_fields(registered.limit),
            payload_schema=dict(registered.payload_schema),
            api=registered.api,
            **by,
        )
    try:
        schema = loaded.payload_model.model_json_schema()
    except PydanticUserError:  # a model pydantic cannot describe: validated here all the same
        schema = {}
    return JobTypeView(
        name=name,
        source="loaded",
        description=loaded.description,
        max_attempts=loaded.max_attempts,
        priority=loaded.priority,
        timeout_seconds=loaded.timeout_seconds,
        **_limit_fields(loaded.limit),
        payload_schema=schema,
        api=loaded.api,
        **by,
    )


def _limit_fields(limit: Limit | None) -> dict[str, Any]:
    """A type's limit in ``JobTypeView``'s fields (nulls and false: none)."""
    if limit is None:
        return {"concurrency": None, "rate": None, "per_key": False}
    rate = None if limit.rate is None else str(limit.rate)
    return {"concurrency": limit.concurrency, "rate": rate, "per_key": limit.per_key}
