"""The FastAPI application: routes are thin, the store and the registry do the work."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobrelay.api import openapi, problems
from jobrelay.api.auth import Authenticator, BearerClient
from jobrelay.api.limits import BodyLimitMiddleware
from jobrelay.api.metrics import RequestMetricsMiddleware, submissions
from jobrelay.api.openapi import problem_responses
from jobrelay.api.schemas import (
    EventList,
    EventView,
    Health,
    JobPage,
    JobView,
    QuarantineReport,
    ReconcileView,
    ReplayView,
    StatsView,
    SubmitJob,
    TraceView,
    job_location,
)
from jobrelay.broker.health import check_broker
from jobrelay.core.errors import (
    BrokerUnavailable,
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    InvalidCursor,
    JobNotFound,
    NotCancellable,
    NotReplayable,
    StoreUnavailable,
)
from jobrelay.core.jobs import Job, is_valid_idempotency_key
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db.store import Client, Store
from jobrelay.handlers.loading import registry_for
from jobrelay.operations import Operations

log = logging.getLogger("jobrelay.api")

# Each operation lists the problems it can answer (api/openapi.py): every /v1 call can be 401
# and 503 (the token is looked up in the database), admin calls 403, a path with a job id 404
# and 422, a POST 413 (the body limit applies to any body).
OWN_JOB_PROBLEMS = problem_responses(401, 404, 422, 503)
ADMIN_PROBLEM_RESPONSES = problem_responses(401, 403, 503)
ADMIN_JOB_PROBLEMS = problem_responses(401, 403, 404, 422, 503)
LOCATION_HEADER = {
    "Location": {"description": "the job's URL, /v1/jobs/{id}", "schema": {"type": "string"}}
}
# Query text reaches SQL parameters, and PostgreSQL text cannot hold a NUL character.
NO_NUL = r"^[^\x00]*$"


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    registry: Registry | None = None,
) -> FastAPI:
    # The same job types as the consumers (JOBRELAY_HANDLERS): submissions are validated here.
    registry = registry or registry_for(settings)
    log.info(
        "job types: %s",
        ", ".join(sorted(registry.types)),
        extra={"event": "job_types", "types": ",".join(sorted(registry.types))},
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is not None:  # injected (tests): its owner closes it
            yield
            return
        app.state.store = Store.connect(
            settings.database_url, pool_size=settings.db_pool_size, application_name="jobrelay-api"
        )
        app.state.auth = Authenticator(app.state.store)
        # Token lookups are cached while this listens for changes to clients (api/auth.py).
        listener = asyncio.create_task(app.state.auth.listen(settings.database_url))
        try:
            yield
        finally:
            listener.cancel()
            # Cancelled, or ended by a bug: either way the cache was no longer trusted.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
            await app.state.store.close()

    app = FastAPI(
        title="jobrelay",
        version="1",
        description="Durable background jobs: accepted means recorded, with its outbox row.",
        lifespan=lifespan,
    )
    # A route that reads a JSON body answers 415 to any other body (api/openapi.py).
    app.router.route_class = openapi.JsonBodyRoute
    app.state.settings = settings
    app.state.registry = registry
    if store is not None:
        app.state.store = store
        app.state.auth = Authenticator(store)
    problems.install(app)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetricsMiddleware)
    _add_job_routes(app)
    _add_admin_routes(app)
    _add_health_routes(app)
    openapi.install(app, registry)
    return app


# --- dependencies -------------------------------------------------------------------------------


async def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


StoreDep = Annotated[Store, Depends(_store)]
# The document's bearer security scheme and the token lookup, in one dependency (api/auth.py).
ClientDep = Annotated[Client, Depends(BearerClient())]
AdminDep = Annotated[Client, Depends(BearerClient(admin=True))]


async def _own_job(store: Store, job_id: uuid.UUID, client: Client) -> Job:
    """The caller's job; another client's job is as unknown as a missing one (404, not 403)."""
    job = await store.get_job(job_id, client_id=client.id)
    if job is None:
        raise JobNotFound()
    return job


def _encode_cursor(created_at: datetime, job_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{job_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, _, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(created_at), uuid.UUID(job_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor() from None


# --- jobs ---------------------------------------------------------------------------------------


def _add_job_routes(app: FastAPI) -> None:
    @app.post(
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
            **problem_responses(400, 401, 409, 413, 422, 503),
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
        max_attempts = body.max_attempts or registry.max_attempts_for(
            body.type, settings.max_attempts
        )
        # From the app's state rather than a StoreDep: one dependency fewer to solve on the
        # hot path.
        store: Store = request.app.state.store
        accepted = await store.accept_job(
            client_id=client.id,
            idempotency_key=idempotency_key,
            job_type=body.type,
            payload=body.payload,
            max_attempts=max_attempts,
        )
        if accepted.conflict:
            submissions(body.type, "conflict").inc()
            raise IdempotencyConflict(
                "the key was used for another type or payload", job_id=str(accepted.job.id)
            )
        outcome = "created" if accepted.created else "existing"
        submissions(body.type, outcome).inc()
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

    @app.get(
        "/v1/jobs",
        response_model=JobPage,
        responses=problem_responses(400, 401, 422, 503),
        summary="List your own jobs, newest first",
    )
    async def list_jobs(
        client: ClientDep,
        store: StoreDep,
        state: JobState | None = None,
        type: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    ) -> JobPage:
        after = _decode_cursor(cursor) if cursor else None
        jobs = await store.list_jobs(
            client_id=client.id,
            state=state.value if state else None,
            job_type=type,
            limit=limit,
            after=after,
        )
        next_cursor = (
            _encode_cursor(jobs[-1].created_at, jobs[-1].id) if len(jobs) == limit else None
        )
        return JobPage(items=[JobView.of(job) for job in jobs], next_cursor=next_cursor)

    @app.get(
        "/v1/jobs/{job_id}",
        response_model=JobView,
        responses=OWN_JOB_PROBLEMS,
        summary="One of your jobs, with its result once succeeded",
    )
    async def get_job(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> JobView:
        return JobView.of(await _own_job(store, job_id, client))

    @app.get(
        "/v1/jobs/{job_id}/events",
        response_model=EventList,
        responses=OWN_JOB_PROBLEMS,
        summary="The job's transition journal",
    )
    async def job_events(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> EventList:
        await _own_job(store, job_id, client)
        events = await store.job_events(job_id)
        return EventList(
            job_id=job_id,
            events=[
                EventView(at=e.at, event=e.event, attempt=e.attempt, detail=e.detail)
                for e in events
            ],
        )

    @app.get(
        "/v1/jobs/{job_id}/trace",
        response_model=TraceView,
        responses=OWN_JOB_PROBLEMS,
        summary="What happened to your job: intent, publishing, deliveries, attempts, result",
    )
    async def job_trace(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> dict[str, Any]:
        await _own_job(store, job_id, client)
        # The owner sees a failure's class and message; tracebacks are for operators.
        trace = await store.trace(job_id, tracebacks=False)
        if trace is None:
            raise JobNotFound()
        return trace

    @app.post(
        "/v1/jobs/{job_id}/cancel",
        response_model=JobView,
        responses=problem_responses(401, 404, 409, 413, 422, 503),
        summary="Cancel a queued or retrying job",
    )
    async def cancel_job(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> JobView:
        cancelled = await store.cancel_job(
            job_id, client_id=client.id, detail="cancelled by client"
        )
        job = await store.get_job(job_id, client_id=client.id)
        if job is None:
            raise JobNotFound()
        if not cancelled:
            raise NotCancellable(f"the job is {job.state.value}", state=job.state.value)
        return JobView.of(job)


# --- admin --------------------------------------------------------------------------------------


async def _operations(request: Request) -> Operations:
    return Operations(
        request.app.state.store, request.app.state.settings, request.app.state.registry
    )


OpsDep = Annotated[Operations, Depends(_operations)]


def _add_admin_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/admin/stats",
        response_model=StatsView,
        responses=ADMIN_PROBLEM_RESPONSES,
        summary="Jobs by state, outbox backlog, expired leases, quarantine by reason",
    )
    async def admin_stats(admin: AdminDep, store: StoreDep) -> dict[str, Any]:
        return await store.stats()

    @app.get(
        "/v1/admin/quarantine",
        response_model=QuarantineReport,
        responses=problem_responses(401, 403, 422, 503),
        summary="Quarantined jobs with their reasons and dead-lettered messages",
    )
    async def admin_quarantine(
        admin: AdminDep,
        ops: OpsDep,
        code: Annotated[str | None, Query(max_length=100, pattern=NO_NUL)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        return await ops.quarantine_report(code=code, limit=limit)

    @app.post(
        "/v1/admin/quarantine/reconcile",
        response_model=ReconcileView,
        responses=problem_responses(401, 403, 413, 503),
        summary="Reconcile the quarantine now (the dispatcher does it by itself): jobs the "
        "broker dead-lettered become quarantined, one message per quarantined job stays",
    )
    async def admin_quarantine_reconcile(admin: AdminDep, ops: OpsDep) -> dict[str, Any]:
        return (await ops.reconcile_quarantine()).as_dict()

    @app.post(
        "/v1/admin/jobs/{job_id}/replay",
        response_model=ReplayView,
        responses=problem_responses(401, 403, 404, 409, 413, 422, 503),
        summary="Queue a quarantined job again with a fresh attempt budget",
    )
    async def admin_replay(job_id: uuid.UUID, admin: AdminDep, ops: OpsDep) -> dict[str, Any]:
        (outcome,) = await ops.replay([job_id])
        if outcome.status == "not_found":
            raise JobNotFound()
        if outcome.status != "replayed":
            raise NotReplayable(f"the job is {outcome.state}", state=outcome.state)
        return outcome.as_dict()

    @app.get(
        "/v1/admin/jobs/{job_id}/trace",
        response_model=TraceView,
        responses=ADMIN_JOB_PROBLEMS,
        summary="What happened to any job: intent, publishing, deliveries, attempts, result",
    )
    async def admin_trace(job_id: uuid.UUID, admin: AdminDep, store: StoreDep) -> dict[str, Any]:
        trace = await store.trace(job_id)
        if trace is None:
            raise JobNotFound()
        return trace


# --- health and metrics -------------------------------------------------------------------------


def _add_health_routes(app: FastAPI) -> None:
    @app.get("/healthz", response_model=Health, summary="The process is alive")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        responses={503: {"model": Health}},
        summary="The database and the broker are reachable",
    )
    async def readyz(request: Request) -> Any:
        settings: Settings = request.app.state.settings
        checks: dict[str, str] = {}
        try:
            await request.app.state.store.ping()
            checks["database"] = "ok"
        except StoreUnavailable:
            checks["database"] = "unavailable"
        try:
            await check_broker(settings.amqp_url)
            checks["broker"] = "ok"
        except BrokerUnavailable:
            checks["broker"] = "unavailable"
        ready = all(value == "ok" for value in checks.values())
        body = Health(status="ok" if ready else "unavailable", checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
