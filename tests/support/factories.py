"""Rows written straight to the database, and small readers of the rows tests check.

Modelled on River's ``testfactory``: one function per kind of row inserts it with sensible
defaults, the test names only what matters to it (``job(store, state=JobState.RUNNING,
attempts=2)``) and gets the row back. They write through the SQLAlchemy tables
(``jobrelay.db.tables``), on the test's ``Store`` (one transaction per call) or on a connection
the test holds open (to control when the rows commit).

For a job made through the API or ``Store.accept_job`` that a test needs in another state,
``set_job`` moves it there with the same defaults.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Row, Table, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobrelay.core.states import TERMINAL_STATES, JobState
from jobrelay.db import tables
from jobrelay.db.store import Store

Database = Store | AsyncConnection


@asynccontextmanager
async def connection(db: Database) -> AsyncIterator[AsyncConnection]:
    """The test's open connection as it is, or a new transaction on the store."""
    if isinstance(db, AsyncConnection):
        yield db
    else:
        async with db.transaction() as opened:
            yield opened


def _state_defaults(state: JobState | str, values: dict[str, Any]) -> dict[str, Any]:
    """What a row in ``state`` holds besides the state: an attempt once it was claimed, a live
    lease while running, a finish time once terminal, an error once quarantined."""
    state = JobState(state)
    defaults: dict[str, Any] = {"state": state.value}
    if state not in (JobState.QUEUED, JobState.CANCELLED, JobState.WAITING):
        defaults["attempts"] = 1
    if state is JobState.WAITING:  # for a parent that has not succeeded (no edge is made)
        defaults["waiting_for"] = 1
    if state is JobState.SLEEPING and "waiting_on" not in values:  # a plain sleep of an hour
        defaults["wake_at"] = defaults["available_at"] = func.now() + timedelta(hours=1)
    if state is JobState.RUNNING:
        defaults["lease_token"] = func.gen_random_uuid()
        defaults["lease_until"] = func.now() + timedelta(seconds=30)
    if state in TERMINAL_STATES:
        defaults["finished_at"] = func.now()
    if state is JobState.QUARANTINED:
        defaults["last_error_code"] = "permanent_error"
        defaults["last_error"] = "test"
    return defaults | values


# --- clients --------------------------------------------------------------------------------


async def client(db: Database, *, name: str | None = None, is_admin: bool = False) -> Row[Any]:
    async with connection(db) as opened:
        statement = (
            insert(tables.clients)
            .values(
                id=uuid.uuid4(),
                name=name or f"client-{uuid.uuid4().hex[:12]}",
                token_hash=f"hash-{uuid.uuid4().hex}",
                is_admin=is_admin,
            )
            .returning(*tables.clients.c)
        )
        return (await opened.execute(statement)).one()


# --- jobs and their outbox rows -------------------------------------------------------------


async def jobs(
    db: Database,
    n: int,
    *,
    client_id: uuid.UUID | None = None,
    state: JobState | str = JobState.QUEUED,
    job_type: str = "demo.sleep",
    payload: dict[str, Any] | None = None,
    max_attempts: int = 3,
    with_outbox: bool = False,
    **values: Any,
) -> list[Row[Any]]:
    """``n`` jobs of one client (a new one unless given), in ``state``; ``with_outbox``, one
    outbox row each, due with its job. Any column of ``jobs`` can be named in ``values``."""
    async with connection(db) as opened:
        if client_id is None:
            client_id = (await client(opened)).id
        common = {
            "client_id": client_id,
            "request_hash": "hash",
            "type": job_type,
            "payload": {"seconds": 0} if payload is None else payload,
            "max_attempts": max_attempts,
            **_state_defaults(state, values),
        }
        rows = [
            {"id": uuid.uuid4(), "idempotency_key": f"k-{uuid.uuid4().hex}", **common}
            for _ in range(n)
        ]
        statement = insert(tables.jobs).values(rows).returning(*tables.jobs.c)
        made = list((await opened.execute(statement)).all())
        by_id = {row.id: row for row in made}
        made = [by_id[row["id"]] for row in rows]  # in the order asked for
        if with_outbox:
            await outbox(opened, made)
        return made


async def job(db: Database, *, result: Any = None, **options: Any) -> Row[Any]:
    """One job (options as for ``jobs``); with ``result``, its stored result of its attempt."""
    async with connection(db) as opened:
        [made] = await jobs(opened, 1, **options)
        if result is not None:
            await job_result(opened, made.id, result, attempt=made.attempts)
        return made


async def set_job(
    db: Database,
    job_ids: uuid.UUID | str | Iterable[uuid.UUID],
    *,
    state: JobState | str | None = None,
    result: Any = None,
    **values: Any,
) -> None:
    """Move existing jobs to ``state`` (with the defaults of ``job``) or just change columns;
    with ``result``, store the job's result as well. Fails unless every job exists."""
    ids = [job_ids] if isinstance(job_ids, uuid.UUID | str) else list(job_ids)
    changes = values if state is None else _state_defaults(state, values)
    async with connection(db) as opened:
        statement = (
            update(tables.jobs)
            .where(tables.jobs.c.id.in_(ids))
            .values(**changes)
            .returning(tables.jobs.c.id, tables.jobs.c.attempts)
        )
        changed = (await opened.execute(statement)).all()
        assert len(changed) == len(ids), f"no job {set(ids) - {row.id for row in changed}}"
        if result is not None:
            for row in changed:
                await job_result(opened, row.id, result, attempt=row.attempts)


async def outbox(db: Database, for_jobs: Sequence[Row[Any]], **values: Any) -> list[Row[Any]]:
    """One outbox row for each job, due when the job is and carrying its priority, client and
    type as every insert of the code does (unless ``values`` say otherwise)."""
    async with connection(db) as opened:
        statement = (
            insert(tables.outbox)
            .values(
                [
                    {
                        "job_id": made.id,
                        "available_at": made.available_at,
                        "priority": made.priority,
                        "client_id": made.client_id,
                        "type": made.type,
                    }
                    | values
                    for made in for_jobs
                ]
            )
            .returning(*tables.outbox.c)
        )
        return sorted((await opened.execute(statement)).all(), key=lambda row: row.id)


async def set_outbox(db: Database, *where: ColumnElement[bool], **values: Any) -> None:
    """Change the outbox rows that match ``where`` (all of them when nothing is given)."""
    async with connection(db) as opened:
        await opened.execute(update(tables.outbox).where(*where).values(**values))


async def job_result(db: Database, job_id: uuid.UUID, result: Any, *, attempt: int = 1) -> Row[Any]:
    async with connection(db) as opened:
        statement = (
            insert(tables.job_results)
            .values(job_id=job_id, result=result, attempt=attempt)
            .returning(*tables.job_results.c)
        )
        return (await opened.execute(statement)).one()


async def job_events(db: Database, job_ids: Iterable[uuid.UUID], event: str, **values: Any) -> None:
    """One journal entry ``event`` for each job (``at``, ``attempt``, ``detail`` in values)."""
    async with connection(db) as opened:
        rows = [{"job_id": job_id, "event": event, **values} for job_id in job_ids]
        await opened.execute(insert(tables.job_events).values(rows))


# --- readers --------------------------------------------------------------------------------


async def failing_inserts(db: Database, table: str, *, when: str = "true") -> None:
    """Every insert into jobrelay's ``table`` whose new row matches ``when`` (SQL over ``NEW``)
    fails with 'injected failure', as a fault the database raised would."""
    async with connection(db) as opened:
        await opened.execute(
            text(
                f"CREATE FUNCTION fail_{table}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
            )
        )
        await opened.execute(
            text(
                f"CREATE TRIGGER fail_{table} BEFORE INSERT ON jobrelay.{table} FOR EACH ROW "
                f"WHEN ({when}) EXECUTE FUNCTION fail_{table}()"
            )
        )


async def outbox_row(db: Database, outbox_id: int) -> Row[Any]:
    async with connection(db) as opened:
        statement = select(tables.outbox).where(tables.outbox.c.id == outbox_id)
        return (await opened.execute(statement)).one()


async def job_row(db: Database, job_id: uuid.UUID | str) -> Row[Any]:
    """Every column of the job, and ``lease_alive``: its lease has not run out yet."""
    lease_alive = (tables.jobs.c.lease_until > func.now()).label("lease_alive")
    async with connection(db) as opened:
        statement = select(tables.jobs, lease_alive).where(tables.jobs.c.id == job_id)
        return (await opened.execute(statement)).one()


async def results_of(db: Database, job_id: uuid.UUID) -> list[tuple[Any, int]]:
    """The job's stored results: (result, attempt) pairs."""
    results = tables.job_results
    async with connection(db) as opened:
        statement = select(results.c.result, results.c.attempt).where(results.c.job_id == job_id)
        return [(row.result, row.attempt) for row in await opened.execute(statement)]


def table_named(name: str) -> Table:
    """The model of jobrelay's table ``name`` (the metadata keys them by their schema)."""
    return tables.metadata.tables[f"{tables.metadata.schema}.{name}"]


async def count(db: Database, table: Table, *where: ColumnElement[bool]) -> int:
    """How many rows of ``table`` match ``where``."""
    async with connection(db) as opened:
        statement = select(func.count()).select_from(table).where(*where)
        return int((await opened.execute(statement)).scalar_one())
