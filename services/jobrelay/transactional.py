"""``jobrelay.enqueue``: a job written inside the caller's own transaction (docs/submitting.md,
"Enqueue inside your own transaction").

An application that shares jobrelay's PostgreSQL database creates a job in the same transaction
as its own rows, as River's ``InsertTx`` does: the job, its outbox row and its ``received`` event
are written through the caller's connection and commit or roll back with everything else the
caller writes there. Committed, the dispatcher relays the job like one the API accepted; rolled
back, there is no job and no message. ``enqueue`` never begins, commits or rolls back anything.

Two functions, one for each kind of connection, so that a forgotten ``await`` cannot silently
enqueue nothing (each refuses the other's connections with a ``TypeError`` naming the right one):

- ``enqueue(connection, ...) -> Job``: a psycopg 3 ``Connection``, an SQLAlchemy ``Connection``,
  ``Session`` or ``scoped_session``;
- ``await enqueue_async(connection, ...) -> Job``: a psycopg ``AsyncConnection``, an SQLAlchemy
  ``AsyncConnection``, ``AsyncSession`` or ``async_scoped_session``.

Both run the API's accept (``db/accept.py``, the statements ``Store.accept_job`` runs) under the
API's idempotency rules, scoped to the client: a new key makes a job; the same key with the same
type, payload and schedule returns the job it made (committed, or made earlier in this same
transaction); another request under the key raises ``jobrelay.IdempotencyConflict`` and writes
nothing. No statement fails on the way (the insert is ``ON CONFLICT DO NOTHING``), so the
caller's transaction stays usable after a conflict. Every argument is checked before the first
statement, for the same reason.

Under READ COMMITTED (PostgreSQL's default), a key another open transaction has just used
waits for that transaction: its job if it commits, a new one if it rolls back. Under
REPEATABLE READ or SERIALIZABLE, a key committed by a transaction that ended after yours began
raises the driver's serialization failure, as any ``INSERT ... ON CONFLICT`` does there: retry
the whole transaction. On a connection in autocommit mode outside a transaction block each
statement commits on its own: the job is then accepted at once, as through the API.

Errors of the caller's connection (a broken connection, an aborted transaction) propagate as
its driver raises them: the connection and its error handling are the caller's.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import replace
from datetime import datetime
from typing import Any, Unpack

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection as SAConnection, TextClause
from sqlalchemy.dialects.postgresql import psycopg as sa_psycopg
from sqlalchemy.ext.asyncio import (
    AsyncConnection as SAAsyncConnection,
    AsyncSession,
    async_scoped_session,
)
from sqlalchemy.orm import Session, scoped_session

from jobrelay import telemetry
from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.clients import matches_any
from jobrelay.core.errors import DuplicateJob
from jobrelay.core.flow import Throttle
from jobrelay.core.idempotency import Submission, check_key, check_submission, checked_job
from jobrelay.core.jobs import Flow, Job, JobRequest, PolicyOptions
from jobrelay.core.registry import Registry
from jobrelay.core.settings import DEFAULT_SCHEMA, libpq_url, validate_schema_name
from jobrelay.core.telemetry_context import valid_traceparent
from jobrelay.core.workflows import OnFailure, Workflow, WorkflowStep, workflow_step
from jobrelay.db import queries as q
from jobrelay.db.accept import Step, Steps, accept_steps, drive, drive_async
from jobrelay.db.policed_accept import is_policed, policed_accept_steps
from jobrelay.db.schema import in_schema
from jobrelay.db.workflow_store import WorkflowSubmission, accept_workflow_steps

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "TypeNotAllowed",
    "UnknownClient",
    "Workflow",
    "enqueue",
    "enqueue_async",
    "enqueue_workflow",
    "enqueue_workflow_async",
    "libpq_url",
]

SyncConnectionLike = psycopg.Connection[Any] | SAConnection | Session | scoped_session[Any]
AsyncConnectionLike = (
    psycopg.AsyncConnection[Any] | SAAsyncConnection | AsyncSession | async_scoped_session[Any]
)

_SQLALCHEMY_SYNC = (SAConnection, Session, scoped_session)
_SQLALCHEMY_ASYNC = (SAAsyncConnection, AsyncSession, async_scoped_session)


class TypeNotAllowed(PermissionError):
    """``client``'s type patterns do not name ``type``: nothing was written. A client's
    explicit patterns bind every path (HTTP, ``enqueue``, ``jobrelay_enqueue``); the default
    rule that keeps Django tasks and ``api=False`` types off HTTP does not apply here."""

    code = "type_not_allowed"

    def __init__(self, client: object, job_type: str) -> None:
        super().__init__(f"jobrelay client {client!r} may not submit type {job_type[:100]!r}")
        self.client = client
        self.type = job_type


class UnknownClient(ValueError):
    """``client`` names no client, or a disabled one (``disabled``): nothing was written."""

    code = "unknown_client"

    def __init__(self, client: object, *, disabled: bool = False) -> None:
        state = "is disabled" if disabled else "does not exist"
        super().__init__(f"jobrelay client {client!r} {state}")
        self.client = client
        self.disabled = disabled


def enqueue(
    connection: SyncConnectionLike,
    *,
    client: str | uuid.UUID,
    type: str,
    payload: dict[str, Any],
    key: str,
    run_at: datetime | None = None,
    delay_seconds: float | None = None,
    max_attempts: int | None = None,
    registry: Registry | None = None,
    traceparent: str | None = None,
    priority: int | None = None,
    concurrency_key: str | None = None,
    unique_key: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    **policies: Unpack[PolicyOptions],
) -> Job:
    """Write a job of ``type`` with ``payload`` for ``client`` under idempotency ``key`` in the
    transaction open on ``connection`` (psycopg 3 ``Connection``, SQLAlchemy ``Connection`` or
    ``Session``), and return it: the new job, or the one the key already made for the same
    request. Nothing is committed here: the job exists once the caller commits.

    - ``client``: a client's name, or its id (a ``uuid.UUID`` or its text). ``UnknownClient``
      (a ``ValueError``) when there is none or it is disabled.
    - ``key``: 1-200 visible ASCII characters, scoped to the client; ``ValueError`` otherwise.
    - ``payload``: a JSON object (a dict) that PostgreSQL's jsonb can store: no NaN, no
      infinity, no NUL character.
    - ``run_at`` (with a time zone) or ``delay_seconds`` (0 to a year), not both: not relayed
      before then. They belong to the request: the same key with another schedule conflicts.
    - ``max_attempts``: 1-100; when not given, the registry's limit for the type, else
      ``DEFAULT_MAX_ATTEMPTS`` (3, the default of ``JOBRELAY_MAX_ATTEMPTS``). ``enqueue`` runs in
      the caller's process and reads no ``JOBRELAY_*`` variable: a deployment that sets
      ``JOBRELAY_MAX_ATTEMPTS`` passes ``max_attempts`` (or gives its types their own limit).
    - ``registry``: when given, the type must be one of its types and the payload must match
      the type's schema (``UnknownJobType``, ``InvalidPayload``), as the API checks. Without
      it only the type's shape is checked (a non-empty string): a consumer that does not know
      the type defers the job and in the end quarantines it (``unknown_job_type``).
    - ``priority`` (-100 to 100; by default the registry's for the type, else 0),
      ``concurrency_key`` and ``unique_key`` (1-200 characters; by default from the type's
      ``concurrency_key=`` and ``unique=`` functions when a ``registry`` is given), as on the
      API (docs/flow-control.md); ``ValueError`` out of range. They belong to the request, when
      given: the same key with another of them conflicts.
    - A ``unique_key`` held by a live (queued, running, retrying) job of the client and type
      makes no job: ``enqueue`` returns that job, whose ``idempotency_key`` is then another
      submission's, not ``key`` (that is how to tell; ``key`` is not kept).
    - ``policies``: ``sequence_key``, ``unique_for_seconds``, ``on_duplicate``,
      ``debounce_seconds``, ``debounce_max_seconds``, ``throttle_key``, as on the API
      (docs/flow-control.md). Such a submission, or one of a type the ``registry`` throttles,
      runs ``db/policed_accept.py``'s accept: its advisory locks are held until the caller's
      transaction ends. ``DuplicateJob`` (``on_duplicate="reject"``) and ``Throttled`` are
      raised having written nothing; the transaction stays usable.
    - ``traceparent``: the W3C trace context the job's publish and execution continue
      (docs/observability.md); by default the caller's current OpenTelemetry span, when there
      is one. ``ValueError`` when it is not a valid ``traceparent``. Not part of the request:
      the same key with another trace context is the same request, and keeps its first one.
    - ``schema``: the schema jobrelay's tables are in, when not the default ``jobrelay``
      (the deployment's ``JOBRELAY_DATABASE_SCHEMA``; ``enqueue`` reads no variable);
      ``ValueError`` when it is not a plain lower-case identifier. The statements name it,
      whatever the connection's search_path.

    Raises ``jobrelay.IdempotencyConflict`` when the key was used for another type, payload or
    schedule (``job_id``: the job that holds it): nothing is written and the transaction stays
    usable. It is the class the HTTP client raises for a ``409`` (an ``ApiError`` with status
    409 and code ``idempotency_conflict``): one ``except`` handles both ways of submitting.
    """
    execute = _sync_executor(connection, schema)
    submission = checked_submission(
        type,
        payload,
        key,
        run_at,
        delay_seconds,
        max_attempts,
        registry,
        traceparent,
        Flow(priority, concurrency_key, unique_key, **policies),  # checked here: ValueError
    )
    return drive(_accept(client, submission, _throttle(registry, type)), execute)


async def enqueue_async(
    connection: AsyncConnectionLike,
    *,
    client: str | uuid.UUID,
    type: str,
    payload: dict[str, Any],
    key: str,
    run_at: datetime | None = None,
    delay_seconds: float | None = None,
    max_attempts: int | None = None,
    registry: Registry | None = None,
    traceparent: str | None = None,
    priority: int | None = None,
    concurrency_key: str | None = None,
    unique_key: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    **policies: Unpack[PolicyOptions],
) -> Job:
    """``enqueue`` on an async connection: a psycopg ``AsyncConnection``, an SQLAlchemy
    ``AsyncConnection`` or ``AsyncSession``. Arguments, result and errors as for ``enqueue``."""
    execute = _async_executor(connection, schema)
    submission = checked_submission(
        type,
        payload,
        key,
        run_at,
        delay_seconds,
        max_attempts,
        registry,
        traceparent,
        Flow(priority, concurrency_key, unique_key, **policies),  # checked here: ValueError
    )
    return await drive_async(_accept(client, submission, _throttle(registry, type)), execute)


def enqueue_workflow(
    connection: SyncConnectionLike,
    workflow: Workflow,
    *,
    client: str | uuid.UUID,
    key: str,
    on_failure: OnFailure | str = OnFailure.CANCEL_DEPENDENTS,
    registry: Registry | None = None,
    traceparent: str | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> uuid.UUID:
    """Write every job of ``workflow`` (a ``jobrelay.Workflow``) for ``client`` under ``key``
    in the transaction open on ``connection``, as ``POST /v1/workflows`` writes them, and
    return the workflow's id: the new one, or the one the key already made for the same jobs
    and ``on_failure``. Nothing is committed here; the connections, ``client``, ``key``,
    ``registry`` and ``traceparent`` are as for ``enqueue``, each job is checked as ``enqueue``
    checks one (its type, payload, ``max_attempts``; ``priority`` and ``max_attempts`` taken
    from the registry when not given, else 0 and ``DEFAULT_MAX_ATTEMPTS``).

    Raises ``jobrelay.IdempotencyConflict`` when the key was used for another workflow
    (``problem["workflow_id"]``: the one that holds it), writing nothing; ``InvalidWorkflow``
    (``code`` ``invalid_workflow``) for a graph the API would refuse (a cycle, 1,000 jobs
    passed, an ``after`` naming no job of it); ``ValueError`` for an unknown ``on_failure``.
    """
    execute = _sync_executor(connection, schema)
    submission = _workflow_submission(workflow, key, on_failure, registry, traceparent)
    return drive(_accept_workflow(client, submission), execute)


async def enqueue_workflow_async(
    connection: AsyncConnectionLike,
    workflow: Workflow,
    *,
    client: str | uuid.UUID,
    key: str,
    on_failure: OnFailure | str = OnFailure.CANCEL_DEPENDENTS,
    registry: Registry | None = None,
    traceparent: str | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> uuid.UUID:
    """``enqueue_workflow`` on an async connection, as ``enqueue_async`` is ``enqueue``'s."""
    execute = _async_executor(connection, schema)
    submission = _workflow_submission(workflow, key, on_failure, registry, traceparent)
    return await drive_async(_accept_workflow(client, submission), execute)


# --- deciding: the checks and the statements, free of any connection -----------------------


def checked_submission(
    job_type: str,
    payload: dict[str, Any],
    key: str,
    run_at: datetime | None,
    delay_seconds: float | None,
    max_attempts: int | None,
    registry: Registry | None,
    traceparent: str | None = None,
    flow: Flow | None = None,
) -> Submission:
    """The checked request (``core/idempotency.py::check_submission``, which the testing kit's
    recorder checks with too) with its trace context, or the error that says what is wrong:
    every check of ``enqueue`` before its first statement."""
    checked = check_submission(
        job_type, payload, key, run_at, delay_seconds, max_attempts, registry, flow
    )
    return replace(checked, traceparent=_trace_context(traceparent))


def _workflow_submission(
    workflow: Workflow,
    key: str,
    on_failure: OnFailure | str,
    registry: Registry | None,
    traceparent: str | None,
) -> WorkflowSubmission:
    """The checked workflow (every job as ``enqueue`` checks one, then the graph), or the
    error that says what is wrong with it."""
    check_key(key)
    policy = OnFailure(on_failure)  # ValueError: no such policy
    steps = tuple(_workflow_step(job, registry) for job in workflow.jobs)
    return WorkflowSubmission(key, policy, steps, _trace_context(traceparent))


def _workflow_step(job: dict[str, Any], registry: Registry | None) -> WorkflowStep:
    ref, job_type, payload = job["ref"], job["type"], job["payload"]
    after, priority = tuple(job.get("after", ())), job.get("priority")
    max_attempts: int | None = job.get("max_attempts")
    checked_job(job_type, payload, max_attempts)
    if registry is not None:
        return workflow_step(
            registry,
            ref=ref,
            type=job_type,
            payload=payload,
            after=after,
            priority=priority,
            max_attempts=max_attempts,
            default_max_attempts=DEFAULT_MAX_ATTEMPTS,
        )
    # No registry: only the shapes are checked (as enqueue does), the type gives no defaults.
    request = JobRequest(
        ref, job_type, payload, max_attempts or DEFAULT_MAX_ATTEMPTS, flow=Flow(priority=priority)
    )
    return WorkflowStep(ref, request, after, max_attempts)


def _trace_context(traceparent: str | None) -> str | None:
    """The given ``traceparent``, checked; else the caller's current span's, if any."""
    if traceparent is None:
        return telemetry.current_traceparent()
    checked = valid_traceparent(traceparent) if isinstance(traceparent, str) else None
    if checked is None:
        raise ValueError(
            "traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lowercase)"
        )
    return checked


def _accept(
    client: str | uuid.UUID, submission: Submission, throttle: Throttle | None
) -> Generator[Step, list[Any], Job]:
    """The client, then the accept of ``Store.accept_job``: ``db/accept.py``'s, or under a
    policy or a ``throttle`` ``db/policed_accept.py``'s, whose advisory locks stay held until
    the caller's transaction ends. A key used for another request, a duplicate refused
    (``on_duplicate="reject"``) and a throttle's refusal raise, having written nothing."""
    client_id = yield from _client_id(client, (submission.request.type,))
    if is_policed(submission, throttle):
        accepted = yield from policed_accept_steps(client_id, submission, throttle)
    else:
        accepted = yield from accept_steps(client_id, submission)
    if accepted.conflict:
        raise _conflict("the key was used for another type, payload or schedule", accepted.job.id)
    if accepted.rejected:
        raise DuplicateJob(
            f"job {accepted.job.id} holds the unique key", job_id=str(accepted.job.id)
        )
    return accepted.job


def _throttle(registry: Registry | None, job_type: str) -> Throttle | None:
    """The type's throttle in code (``@registry.job(..., throttle=)``) when a registry is
    given; a throttle set at runtime (``jobrelay limits set``) is the API's alone."""
    if registry is None or job_type not in registry:
        return None
    return registry.get(job_type).throttle


def _accept_workflow(client: str | uuid.UUID, submission: WorkflowSubmission) -> Steps[uuid.UUID]:
    """The client, then the accept of ``WorkflowStore.accept`` (``db/workflow_store.py``); a
    key used for another workflow raises, having written nothing."""
    types = tuple(step.request.type for step in submission.steps)
    client_id = yield from _client_id(client, types)
    accepted = yield from accept_workflow_steps(client_id, submission)
    if accepted.conflict:
        raise _conflict(
            "the key was used for another workflow", accepted.workflow_id, held_by="workflow_id"
        )
    return accepted.workflow_id


def _client_id(
    client: str | uuid.UUID, types: tuple[str, ...]
) -> Generator[Step, list[Any], uuid.UUID]:
    """The enabled client's id, once its type patterns (if it has any) name every one of
    ``types``; ``UnknownClient`` or ``TypeNotAllowed`` otherwise."""
    by_id: uuid.UUID | None
    by_name: str | None
    if isinstance(client, uuid.UUID):
        by_id, by_name = client, None
    elif isinstance(client, str):
        if not client or "\x00" in client:  # no client has such a name (nor could have)
            raise UnknownClient(client)
        by_id, by_name = _as_uuid(client), client
    else:
        raise TypeError(f"client must be a client's name or id, not {_kind(client)}")
    rows = yield q.CLIENT_BY_ID_OR_NAME, {"id": by_id, "name": by_name}
    if not rows:
        raise UnknownClient(client)
    if rows[0].disabled:
        raise UnknownClient(client, disabled=True)
    patterns = rows[0].type_patterns
    for job_type in types:
        if patterns is not None and not matches_any(patterns, job_type):
            raise TypeNotAllowed(client, job_type)
    found: uuid.UUID = rows[0].id
    return found


def _as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _conflict(detail: str, holder: uuid.UUID, *, held_by: str = "job_id") -> Exception:
    """The HTTP client's ``IdempotencyConflict``. Imported here, on this rare path only: the
    client's package loads httpx."""
    from jobrelay_client.errors import IdempotencyConflict

    return IdempotencyConflict.of_holder(detail, holder, held_by=held_by)


def _kind(value: object) -> str:
    return type(value).__name__


# --- acting: one statement on the caller's connection ----------------------------------------


_PSYCOPG_DIALECT = sa_psycopg.dialect()  # type: ignore[no-untyped-call]


@functools.cache
def _psycopg_sql(statement: TextClause, schema: str = DEFAULT_SCHEMA) -> str:
    """The statement with psycopg's placeholders (``%(name)s``), compiled once, as
    ``Store`` compiles it for its pooled psycopg connections, naming jobrelay's objects in
    ``schema`` (db/schema.py)."""
    return str(in_schema(statement, schema).compile(dialect=_PSYCOPG_DIALECT))


def _sync_executor(
    connection: object, schema: str
) -> Callable[[TextClause, dict[str, Any]], list[Any]]:
    validate_schema_name(schema)
    if isinstance(connection, psycopg.Connection):
        raw = connection

        def run_psycopg(statement: TextClause, params: dict[str, Any]) -> list[Any]:
            with raw.cursor(row_factory=namedtuple_row) as cursor:
                cursor.execute(_psycopg_sql(statement, schema), params)
                return cursor.fetchall() if cursor.description else []

        return run_psycopg
    if isinstance(connection, _SQLALCHEMY_SYNC):
        alchemy = connection

        def run_sqlalchemy(statement: TextClause, params: dict[str, Any]) -> list[Any]:
            result = alchemy.execute(in_schema(statement, schema), params)
            return list(result.all())  # every statement of enqueue returns rows

        return run_sqlalchemy
    if isinstance(connection, (psycopg.AsyncConnection, *_SQLALCHEMY_ASYNC)):
        raise TypeError(
            f"an async connection ({_kind(connection)}) needs "
            "`await jobrelay.enqueue_async(connection, ...)`"
        )
    raise TypeError(
        "enqueue needs a psycopg Connection or an SQLAlchemy Connection or Session, "
        f"not {_kind(connection)}"
    )


def _async_executor(
    connection: object, schema: str
) -> Callable[[TextClause, dict[str, Any]], Awaitable[list[Any]]]:
    validate_schema_name(schema)
    if isinstance(connection, psycopg.AsyncConnection):
        raw = connection

        async def run_psycopg(statement: TextClause, params: dict[str, Any]) -> list[Any]:
            async with raw.cursor(row_factory=namedtuple_row) as cursor:
                await cursor.execute(_psycopg_sql(statement, schema), params)
                return await cursor.fetchall() if cursor.description else []

        return run_psycopg
    if isinstance(connection, _SQLALCHEMY_ASYNC):
        alchemy = connection

        async def run_sqlalchemy(statement: TextClause, params: dict[str, Any]) -> list[Any]:
            result = await alchemy.execute(in_schema(statement, schema), params)
            return list(result.all())  # every statement of enqueue returns rows

        return run_sqlalchemy
    if isinstance(connection, (psycopg.Connection, *_SQLALCHEMY_SYNC)):
        raise TypeError(
            f"a sync connection ({_kind(connection)}) needs "
            "`jobrelay.enqueue(connection, ...)`, without await"
        )
    raise TypeError(
        "enqueue_async needs a psycopg AsyncConnection or an SQLAlchemy AsyncConnection or "
        f"AsyncSession, not {_kind(connection)}"
    )
