"""``/v1/jobs``: submit, list, read, trace and cancel the caller's own jobs."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response

from jobrelay.api import openapi
from jobrelay.api.deps import (
    JOB_PROBLEMS,
    LOCATION_HEADER,
    V1_PROBLEMS,
    ClientDep,
    OwnJobDep,
    PageDep,
    StoreDep,
)
from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import (
    NO_NUL,
    EventList,
    EventView,
    JobPage,
    JobView,
    SubmitJob,
    TraceView,
    job_location,
)
from jobrelay.core.clients import RateLimit
from jobrelay.core.errors import (
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    JobNotFound,
    NotCancellable,
    RateLimited,
)
from jobrelay.core.jobs import JobRequest, is_valid_idempotency_key
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.trace import trace_document
from jobrelay.db.store import Store

log = logging.getLogger("jobrelay.api")

# A route that reads a JSON body answers 415 to any other body (api/openapi.py).
router = APIRouter(route_class=openapi.JsonBodyRoute, responses=V1_PROBLEMS)


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=JobView,
    responses={
        202: {
            "description": "Accepted: recorded with its outbox row",
            "headers": LOCATION_HEADER,
        },
        200: {
            "model": JobView,
            "description": "The key was used before for the same request: that job, now",
            "headers": LOCATION_HEADER,
        },
        **problem_responses(400, 409, 413, 422, 429),
    },
    summary="Submit a job (idempotent by Idempotency-Key)",
)
async def submit_job(
    body: SubmitJob,
    request: Request,
    client: ClientDep,
    idempotency_key: Annotated[
        str,
        Header(
            max_length=1000,
            description="1–200 visible ASCII characters, scoped to the client; a missing "
            "or invalid key is answered 400 idempotency_key_missing / _invalid",
            # Documented as the key really is (docs/invariants.md, 5); a missing key becomes
            # the 400 problem in api/problems.py, an invalid one below.
            json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
        ),
    ],
) -> Response:
    if not is_valid_idempotency_key(idempotency_key):
        raise IdempotencyKeyInvalid()
    registry: Registry = request.app.state.registry
    registry.validate_payload(body.type, body.payload)
    settings: Settings = request.app.state.settings
    max_attempts = body.max_attempts or registry.max_attempts_for(body.type, settings.max_attempts)
    # From the app's state rather than a StoreDep: one dependency fewer to solve on the
    # hot path.
    store: Store = request.app.state.store
    metrics: ApiMetrics = request.app.state.metrics
    limit: RateLimit | None = client.rate_limit or request.app.state.rate_limit
    if limit is not None:
        # Counted before anything is written: a limited submission leaves no trace.
        wait = await store.take_rate_token(client.id, limit)
        if wait is not None:
            raise RateLimited(wait, limit.describe())
    accepted = await store.accept_job(
        client.id,
        JobRequest(idempotency_key, body.type, body.payload, max_attempts),
    )
    if accepted.conflict:
        metrics.submissions(body.type, "conflict").inc()
        raise IdempotencyConflict(
            "the key was used for another type or payload", job_id=str(accepted.job.id)
        )
    outcome = "created" if accepted.created else "existing"
    metrics.submissions(body.type, outcome).inc()
    log.info(
        "job accepted" if accepted.created else "job submitted again with the same key",
        extra={
            "job_id": str(accepted.job.id),
            "type": body.type,
            "attempt": 0,
            "event": "received" if accepted.created else "idempotent_repeat",
        },
    )
    # Serialized once here rather than re-validated through response_model: this is the
    # hot path, and the model above is still what the OpenAPI document describes.
    return Response(
        JobView.of(accepted.job).model_dump_json(),
        status_code=202 if accepted.created else 200,
        media_type="application/json",
        headers={"Location": job_location(accepted.job.id)},
    )


@router.get(
    "/v1/jobs",
    response_model=JobPage,
    responses=problem_responses(400, 422),
    summary="List your own jobs, newest first",
)
async def list_jobs(
    client: ClientDep,
    store: StoreDep,
    page: PageDep,
    state: JobState | None = None,
    type: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
) -> JobPage:
    jobs = await store.list_jobs(
        client_id=client.id,
        state=state.value if state else None,
        job_type=type,
        limit=page.limit,
        after=page.after,
    )
    return JobPage(items=[JobView.of(job) for job in jobs], next_cursor=page.next_cursor(jobs))


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobView,
    responses=JOB_PROBLEMS,
    summary="One of your jobs, with its result once succeeded",
)
async def get_job(job: OwnJobDep) -> JobView:
    return JobView.of(job)


@router.get(
    "/v1/jobs/{job_id}/events",
    response_model=EventList,
    responses=JOB_PROBLEMS,
    summary="The job's transition journal",
)
async def job_events(job: OwnJobDep, store: StoreDep) -> EventList:
    events = await store.job_events(job.id)
    return EventList(
        job_id=job.id,
        events=[
            EventView(at=e.at, event=e.event, attempt=e.attempt, detail=e.detail) for e in events
        ],
    )


@router.get(
    "/v1/jobs/{job_id}/trace",
    response_model=TraceView,
    responses=JOB_PROBLEMS,
    summary="What happened to your job: intent, publishing, deliveries, attempts, result",
)
async def job_trace(job: OwnJobDep, store: StoreDep) -> dict[str, Any]:
    # The owner sees a failure's class and message; tracebacks are for operators.
    trace = await store.trace(job.id)
    if trace is None:
        raise JobNotFound()
    return trace_document(trace, tracebacks=False)


@router.post(
    "/v1/jobs/{job_id}/cancel",
    response_model=JobView,
    responses=problem_responses(404, 409, 413, 422),
    summary="Cancel a queued or retrying job",
)
async def cancel_job(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> JobView:
    cancelled = await store.cancel_job(job_id, client_id=client.id, detail="cancelled by client")
    job = await store.get_job(job_id, client_id=client.id)
    if job is None:
        raise JobNotFound()
    if not cancelled:
        raise NotCancellable(f"the job is {job.state.value}", state=job.state.value)
    return JobView.of(job)
