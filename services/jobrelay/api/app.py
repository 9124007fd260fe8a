"""The FastAPI application: routes are thin, the store and the registry do the work."""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobrelay.api import problems
from jobrelay.api.auth import Authenticator
from jobrelay.api.limits import BodyLimitMiddleware
from jobrelay.api.metrics import SUBMISSIONS, RequestMetricsMiddleware
from jobrelay.api.schemas import (
    EventList,
    EventView,
    Health,
    JobPage,
    JobView,
    Problem,
    SubmitJob,
    job_location,
)
from jobrelay.broker.health import check_broker
from jobrelay.core.errors import (
    BrokerUnavailable,
    IdempotencyConflict,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
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
from jobrelay.handlers.loading import load_registry
from jobrelay.operations import Operations

log = logging.getLogger("jobrelay.api")

# Errors are sent as application/problem+json only: the schema goes under that media type (a
# "model" would also document an application/json body that is never sent).
PROBLEM_CONTENT: dict[str, Any] = {
    problems.PROBLEM_CONTENT_TYPE: {"schema": Problem.model_json_schema()}
}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"content": PROBLEM_CONTENT} for status in (400, 401, 404, 409, 413, 422, 503)
}
ADMIN_PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"content": PROBLEM_CONTENT} for status in (401, 403, 422, 503)
}
# Query text reaches SQL parameters, and PostgreSQL text cannot hold a NUL character.
NO_NUL = r"^[^\x00]*$"


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    registry: Registry | None = None,
) -> FastAPI:
    registry = registry or load_registry(settings.handlers)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is not None:  # injected (tests): its owner closes it
            yield
            return
        app.state.store = Store.connect(
            settings.database_url, pool_size=settings.db_pool_size, application_name="jobrelay-api"
        )
        app.state.auth = Authenticator(app.state.store)
        try:
            yield
        finally:
            await app.state.store.close()

    app = FastAPI(
        title="jobrelay",
        version="1",
        description="Durable background jobs: accepted means recorded, with its outbox row.",
        lifespan=lifespan,
    )
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
    return app


# --- dependencies -------------------------------------------------------------------------------


async def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def _client(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Client:
    auth: Authenticator = request.app.state.auth
    return await auth.client_for(authorization)


async def _admin(request: Request, authorization: Annotated[str | None, Header()] = None) -> Client:
    auth: Authenticator = request.app.state.auth
    return await auth.admin_for(authorization)


StoreDep = Annotated[Store, Depends(_store)]
ClientDep = Annotated[Client, Depends(_client)]
AdminDep = Annotated[Client, Depends(_admin)]


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
            200: {"model": JobView, "description": "The key was used before"},
            **PROBLEM_RESPONSES,
        },
        summary="Submit a job (idempotent by Idempotency-Key)",
    )
    async def submit_job(
        body: SubmitJob,
        request: Request,
        client: ClientDep,
        store: StoreDep,
        idempotency_key: Annotated[
            str | None,
            Header(
                max_length=1000,
                description="Required: 1–200 visible ASCII characters, scoped to the client "
                "(a missing or invalid key is answered 400)",
                # Documented as the contract says; checked below for a 400 with its own code.
                json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
            ),
        ] = None,
    ) -> Response:
        if idempotency_key is None:
            raise IdempotencyKeyMissing()
        if not is_valid_idempotency_key(idempotency_key):
            raise IdempotencyKeyInvalid()
        registry: Registry = request.app.state.registry
        registry.validate_payload(body.type, body.payload)
        settings: Settings = request.app.state.settings
        max_attempts = body.max_attempts or registry.max_attempts_for(
            body.type, settings.max_attempts
        )
        accepted = await store.accept_job(
            client_id=client.id,
            idempotency_key=idempotency_key,
            job_type=body.type,
            payload=body.payload,
            max_attempts=max_attempts,
        )
        if accepted.conflict:
            SUBMISSIONS.labels(body.type, "conflict").inc()
            raise IdempotencyConflict(
                "the key was used for another type or payload", job_id=str(accepted.job.id)
            )
        outcome = "created" if accepted.created else "existing"
        SUBMISSIONS.labels(body.type, outcome).inc()
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
        responses=PROBLEM_RESPONSES,
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
        responses=PROBLEM_RESPONSES,
        summary="One of your jobs, with its result once succeeded",
    )
    async def get_job(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> JobView:
        return JobView.of(await _own_job(store, job_id, client))

    @app.get(
        "/v1/jobs/{job_id}/events",
        response_model=EventList,
        responses=PROBLEM_RESPONSES,
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
        responses=PROBLEM_RESPONSES,
        summary="What happened to your job: intent, publishing, deliveries, attempts, result",
    )
    async def job_trace(job_id: uuid.UUID, client: ClientDep, store: StoreDep) -> dict[str, Any]:
        await _own_job(store, job_id, client)
        trace = await store.trace(job_id)
        if trace is None:
            raise JobNotFound()
        return trace

    @app.post(
        "/v1/jobs/{job_id}/cancel",
        response_model=JobView,
        responses=PROBLEM_RESPONSES,
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
        responses=ADMIN_PROBLEM_RESPONSES,
        summary="Jobs by state, outbox backlog, expired leases, quarantine by reason",
    )
    async def admin_stats(admin: AdminDep, store: StoreDep) -> dict[str, Any]:
        return await store.stats()

    @app.get(
        "/v1/admin/quarantine",
        responses=ADMIN_PROBLEM_RESPONSES,
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
        "/v1/admin/jobs/{job_id}/replay",
        responses={
            **ADMIN_PROBLEM_RESPONSES,
            404: PROBLEM_RESPONSES[404],
            409: PROBLEM_RESPONSES[409],
        },
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
        responses={**ADMIN_PROBLEM_RESPONSES, 404: PROBLEM_RESPONSES[404]},
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
