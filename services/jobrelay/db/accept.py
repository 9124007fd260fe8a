"""The accept of one submission, written once as the statements it runs (docs/life-of-a-job.md).

``accept_steps`` is a generator of statements: it yields each statement with its parameters,
is sent back the rows, and returns the outcome. It touches no connection, so both paths drive
the same algorithm: ``Store.accept_job`` on its pool, ``jobrelay.enqueue`` on the caller's
connection (``drive`` and ``drive_async``). The request hash and what a held key answers are
the pure core's (``core/idempotency.py``), shared with the batch, the workflow accept and the
testing kit's ``Recorder``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from jobrelay.core.idempotency import KeyDecision, Submission, decide
from jobrelay.core.ids import new_id
from jobrelay.core.jobs import Job
from jobrelay.db import queries as q
from jobrelay.db.rows import job_from_row

# One statement to run and its parameters; the rows it returned are sent back.
Step = tuple[TextClause, dict[str, Any]]
T = TypeVar("T")
Steps = Generator[Step, list[Any], T]

# The insert of a new job ``id`` of a client for a submission, as a statement to run.
InsertStep = Callable[[uuid.UUID, uuid.UUID, Submission], Step]

# Tries of an accept whose key's job retention deletes between the insert and the read.
ACCEPT_TRIES = 3


@dataclass(frozen=True)
class AcceptResult:
    job: Job
    created: bool
    """False when the key was already used: ``job`` is then the existing job."""

    conflict: bool
    """True when the key was used for a different type or payload."""

    deduplicated: bool = False
    """True when a job of the same client, type and unique key answered the submission
    (``job``: live, or ended within its window), which made none: its idempotency key is not
    kept (docs/flow-control.md)."""

    debounced: bool = False
    """True when the submission's payload and start went to the key's queued job (``job``,
    as it is now), which made none: its idempotency key is not kept."""

    rejected: bool = False
    """True when the submission asked ``on_duplicate: reject`` and was deduplicated: its
    interface refuses it (``DuplicateJob``, 409 duplicate_job naming ``job``)."""

    @classmethod
    def held(cls, job: Job, decision: KeyDecision) -> AcceptResult:
        """The answer to a submission whose key ``job`` holds (``decision``: ``decide``'s)."""
        return cls(job=job, created=False, conflict=decision is KeyDecision.CONFLICT)


def held_by_row(row: Any, fingerprint: str) -> AcceptResult:
    """The answer to a submission hashed ``fingerprint`` whose key the job of ``row`` holds
    (a row of JOB_BY_KEY or JOBS_BY_KEYS)."""
    return AcceptResult.held(job_from_row(row), decide(row.request_hash, fingerprint))


def accept_steps(
    client_id: uuid.UUID,
    submission: Submission,
    *,
    inserted_nothing: bool = False,
    insert: InsertStep | None = None,
) -> Steps[AcceptResult]:
    """Two statements, each atomic: the insert of job + outbox row + event, then (only when the
    key existed) a read of the job that holds it. ON CONFLICT waits for a concurrent insert of
    the same key to commit, so the read finds it, unless retention deleted that job in between:
    then the key is free, and the insert is tried again.

    A unique submission whose insert met a live job of its unique key rather than its
    idempotency key reads that job (LIVE_JOB_BY_UNIQUE_KEY) and answers it, deduplicated; when
    that job finished in between, nothing holds the unique key any more, and the insert is
    tried again too.

    ``inserted_nothing``: the first insert already ran elsewhere (the accept's group commit,
    ``Store.accept_job``) and made nothing; the steps begin with the read. ``insert``: the
    statement that inserts (the policed accept's, ``db/policed_accept.py``); None: ACCEPT_JOB."""
    insert = insert or _insert_step
    request, fingerprint = submission.request, submission.fingerprint
    flow = request.job_flow
    for tried in range(ACCEPT_TRIES):
        job_id = new_id()  # time-ordered: appends at the right edge of the indexes
        if inserted_nothing and tried == 0:
            inserted: list[Any] = []
        else:
            inserted = yield insert(job_id, client_id, submission)
        if inserted:
            job = request.as_new_job(
                job_id,
                client_id,
                at=inserted[0].created_at,
                available_at=inserted[0].available_at,
                traceparent=submission.traceparent,
            )
            return AcceptResult(job=job, created=True, conflict=False)
        existing = yield (
            q.JOB_BY_KEY,
            {"client_id": client_id, "idempotency_key": request.idempotency_key},
        )
        if existing:
            return held_by_row(existing[0], fingerprint)
        if flow.unique_key is not None:
            live = yield (
                q.LIVE_JOB_BY_UNIQUE_KEY,
                {"client_id": client_id, "type": request.type, "unique_key": flow.unique_key},
            )
            if live:
                job = job_from_row(live[0])
                return AcceptResult(job=job, created=False, conflict=False, deduplicated=True)
    raise RuntimeError("an idempotency key's job kept vanishing between insert and read")


def many_params(
    ids: Sequence[uuid.UUID], client_ids: Sequence[uuid.UUID], submissions: Sequence[Submission]
) -> dict[str, Any]:
    """ACCEPT_JOBS' arrays: a new job ``ids[i]`` of ``client_ids[i]`` for ``submissions[i]``."""
    requests = [submission.request for submission in submissions]
    flows = [request.job_flow for request in requests]
    return {
        "ids": list(ids),
        "client_ids": list(client_ids),
        "idempotency_keys": [request.idempotency_key for request in requests],
        "request_hashes": [submission.fingerprint for submission in submissions],
        "types": [request.type for request in requests],
        "payloads": [submission.payload_json for submission in submissions],
        "max_attempts": [request.max_attempts for request in requests],
        "run_ats": [request.run_at for request in requests],
        "delays": [request.delay_seconds for request in requests],
        "priorities": [flow.priority or 0 for flow in flows],
        "concurrency_keys": [flow.concurrency_key for flow in flows],
        "unique_keys": [flow.unique_key for flow in flows],
        "traceparents": [submission.traceparent for submission in submissions],
    }


def made_by_row(client_id: uuid.UUID, submission: Submission, row: Any) -> AcceptResult:
    """The answer to a submission whose job ACCEPT_JOBS inserted (``row``: its returned row)."""
    job = submission.request.as_new_job(
        row.id,
        client_id,
        at=row.created_at,
        available_at=row.available_at,
        traceparent=submission.traceparent,
    )
    return AcceptResult(job=job, created=True, conflict=False)


def _insert_step(job_id: uuid.UUID, client_id: uuid.UUID, submission: Submission) -> Step:
    """ACCEPT_JOB of ``submission`` as the job ``job_id`` of ``client_id``."""
    return (q.ACCEPT_JOB, insert_params(job_id, client_id, submission))


def insert_params(
    job_id: uuid.UUID, client_id: uuid.UUID, submission: Submission
) -> dict[str, Any]:
    """ACCEPT_JOB's parameters for ``submission`` as the job ``job_id`` of ``client_id``."""
    request, flow = submission.request, submission.request.job_flow
    return {
        "id": job_id,
        "client_id": client_id,
        "idempotency_key": request.idempotency_key,
        "request_hash": submission.fingerprint,
        "type": request.type,
        "payload": submission.payload_json,
        "max_attempts": request.max_attempts,
        "run_at": request.run_at,
        "delay_seconds": request.delay_seconds,
        "traceparent": submission.traceparent,
        "priority": flow.priority or 0,
        "concurrency_key": flow.concurrency_key,
        "unique_key": flow.unique_key,
    }


def rows_on(
    connection: AsyncConnection,
) -> Callable[[TextClause, dict[str, Any]], Awaitable[list[Any]]]:
    """``drive_async``'s ``execute`` on ``connection``, inside the transaction open on it."""

    async def rows(statement: TextClause, params: dict[str, Any]) -> list[Any]:
        return list((await connection.execute(statement, params)).all())

    return rows


def drive(steps: Steps[T], execute: Callable[[TextClause, dict[str, Any]], list[Any]]) -> T:
    """Run every statement of ``steps`` with ``execute`` and return what ``steps`` returns."""
    step = next(steps)
    while True:
        rows = execute(*step)
        try:
            step = steps.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


async def drive_async(
    steps: Steps[T], execute: Callable[[TextClause, dict[str, Any]], Awaitable[list[Any]]]
) -> T:
    """``drive`` with a coroutine ``execute``."""
    step = next(steps)
    while True:
        rows = await execute(*step)
        try:
            step = steps.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


def all_present(results: Sequence[AcceptResult | None]) -> list[AcceptResult]:
    """The batch's results, one per request in order: a request left without one is a bug,
    never a shorter list that would pair the others with the wrong requests."""
    missing = [index for index, result in enumerate(results) if result is None]
    assert not missing, f"batch requests without a result: {missing}"
    return cast(list[AcceptResult], list(results))
