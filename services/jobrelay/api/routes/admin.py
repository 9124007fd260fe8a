"""``/v1/admin``: stats, the quarantine, replay and any job's trace; admin clients only."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from jobrelay.api import openapi
from jobrelay.api.deps import (
    ADMIN_PROBLEMS,
    JOB_PROBLEMS,
    AdminDep,
    OpsDep,
    StoreDep,
)
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import (
    QuarantineQuery,
    QuarantineReport,
    ReconcileView,
    ReplayView,
    StatsView,
    TraceView,
)
from jobrelay.core.errors import JobNotFound, NotReplayable
from jobrelay.core.trace import trace_document

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
async def admin_replay(job_id: uuid.UUID, admin: AdminDep, ops: OpsDep) -> dict[str, Any]:
    (outcome,) = await ops.replay([job_id])
    if outcome.status == "not_found":
        raise JobNotFound()
    if outcome.status != "replayed":
        raise NotReplayable(f"the job is {outcome.state}", state=outcome.state)
    return outcome.as_dict()


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
