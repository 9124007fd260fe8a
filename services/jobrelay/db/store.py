"""The PostgreSQL store: runs the named statements of ``queries`` and maps rows to values.

Each public method is one short transaction. Connection failures surface as
``StoreUnavailable``; everything else is a bug and propagates.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from psycopg.errors import UndefinedTable
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from jobrelay.core.durable import StepRecord
from jobrelay.core.errors import StoreUnavailable, Throttled
from jobrelay.core.flow import Throttle
from jobrelay.core.idempotency import Submission, decide
from jobrelay.core.ids import new_id
from jobrelay.core.jobs import CancelAnswer, Job, JobRequest, JournalEntry, SignalAnswer
from jobrelay.core.settings import DEFAULT_SCHEMA
from jobrelay.core.states import TERMINAL_STATES
from jobrelay.core.stats import (
    BROKER_BLOCK_FRESH_SECONDS,
    BrokerBlock,
    FinishedMinute,
    OutboxBacklog,
    PausedQueue,
    RetryingSummary,
    SystemStats,
)
from jobrelay.core.trace import JobTrace, OutboxEntry, SignalEntry, StoredResult
from jobrelay.db import queries as q
from jobrelay.db.accept import (
    AcceptResult,
    accept_steps,
    all_present,
    drive_async,
    held_by_row,
    made_by_row,
    many_params,
    rows_on,
)
from jobrelay.db.arrays import with_array_literals
from jobrelay.db.engine import PoolMode, is_primary_gone, make_engine, translated_errors
from jobrelay.db.group_commit import GroupCommit
from jobrelay.db.policed_accept import is_policed, policed_accept_steps
from jobrelay.db.rows import job_from_row, journal_entry, steps_from_json
from jobrelay.db.schema import translator

__all__ = ["AcceptResult", "Store", "job_from_row"]

# How much of a job's recorded steps a read brings (``get_job``): their names, kinds and times,
# or those with their values.
StepsShown = Literal["names", "values"]


class Store:
    """Two pools: ``fast_engine`` (autocommit) runs the single statements that are nearly all
    the work; ``engine`` runs the few multi-statement transactions (stats, traces, the rare
    paths of claim and finish)."""

    def __init__(
        self, engine: AsyncEngine, fast_engine: AsyncEngine, url: str, schema: str = DEFAULT_SCHEMA
    ) -> None:
        self.engine = engine
        # Every named statement is a single statement, atomic on its own: running it in
        # autocommit saves the BEGIN and COMMIT round trips (3 → 1 on the accept path).
        self.fast_engine = fast_engine
        self.url = url
        # jobrelay's schema (JOBRELAY_DATABASE_SCHEMA): the engines translate the statements they
        # run into it (db/schema.py); ``fetch_all`` drives psycopg itself and translates here.
        self.schema = schema
        self._translate = translator(schema)
        self._sql_cache: dict[TextClause, str] = {}
        self._inserts: GroupCommit[tuple[uuid.UUID, Submission], AcceptResult | None] = GroupCommit(
            self._insert_group
        )

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        application_name: str = "jobrelay",
        generic_plans: bool = False,
        pool_mode: PoolMode = "session",
        schema: str = DEFAULT_SCHEMA,
    ) -> Store:
        """``generic_plans``: the single statements keep one generic plan each
        (``engine.make_engine``); the dispatcher's, for its flow pick. ``pool_mode``:
        ``Settings.pool_mode`` ("transaction" behind PgBouncer)."""
        return cls(
            make_engine(
                url,
                pool_size=max(2, pool_size // 2),
                pool_timeout=pool_timeout,
                application_name=application_name,
                pool_mode=pool_mode,
                schema=schema,
            ),
            make_engine(
                url,
                pool_size=pool_size,
                pool_timeout=pool_timeout,
                application_name=application_name,
                autocommit=True,
                generic_plans=generic_plans,
                pool_mode=pool_mode,
                schema=schema,
            ),
            url,
            schema,
        )

    async def close(self) -> None:
        await self._inserts.close()  # the accepts in flight end first: theirs may be a commit
        await self.fast_engine.dispose()
        await self.engine.dispose()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """One transaction; connection failures become ``StoreUnavailable``."""
        async with translated_errors(self.url), self.engine.begin() as connection:
            yield connection

    async def fetch_all(self, statement: TextClause, **params: Any) -> list[Any]:
        """Run one statement in its own (implicit) transaction and return every row.

        The hot path of every service. The statement, compiled once by SQLAlchemy's dialect,
        runs on a pooled psycopg connection directly: for one statement, SQLAlchemy's
        connection and result machinery cost more CPU than the round trip (the consumer spent
        about 1 ms of Python per job in it). Rows are named tuples: ``row.id``, as with
        SQLAlchemy rows.
        """
        async with self._pooled_driver() as driver:
            return await self._rows_on(driver, statement, params)

    @asynccontextmanager
    async def fast_transaction(
        self,
    ) -> AsyncIterator[Callable[[TextClause, dict[str, Any]], Awaitable[list[Any]]]]:
        """One transaction on a connection of the fast pool, driven as ``fetch_all`` drives
        its statement (no SQLAlchemy result per statement): what it yields runs a statement
        in it and returns its rows. The short transactions of the rarer paths that a job may
        still take often (a policed accept, a finish that releases a sequence's next job)."""
        async with self._pooled_driver() as driver, driver.transaction():

            async def rows(statement: TextClause, params: dict[str, Any]) -> list[Any]:
                return await self._rows_on(driver, statement, params)

            yield rows

    @asynccontextmanager
    async def _pooled_driver(self) -> AsyncIterator[Any]:
        """A pooled psycopg connection of the fast pool, back to the pool afterwards; one that
        failed is replaced as SQLAlchemy's own connection would be."""
        async with translated_errors(self.url):
            pooled = await self.fast_engine.raw_connection()
            try:
                driver: Any = pooled.driver_connection
                try:
                    yield driver
                except BaseException as error:  # CancelledError too: a timeout may interrupt
                    if is_primary_gone(error):
                        # Its server is no longer the primary (or going away): this connection
                        # and every one pooled before it are replaced, as SQLAlchemy's own
                        # Connection does on a disconnect (engine._primary_gone_is_a_disconnect).
                        await greenlet_spawn(self.fast_engine.pool._invalidate, pooled, error)
                    elif (
                        driver.broken
                        or driver.closed
                        or driver.info.transaction_status != TransactionStatus.IDLE
                    ):
                        # Dead, or left mid-query: keep it out of the pool.
                        await greenlet_spawn(pooled.invalidate)
                    raise
            finally:
                await greenlet_spawn(pooled.close)  # back to the pool

    async def _rows_on(
        self, driver: Any, statement: TextClause, params: dict[str, Any]
    ) -> list[Any]:
        async with driver.cursor(row_factory=namedtuple_row) as cursor:
            await cursor.execute(self._compiled(statement), with_array_literals(params))
            # The result's status, not ``cursor.description``, which builds a column object
            # per column on every call.
            result = cursor.pgresult
            if result is None or result.status != ExecStatus.TUPLES_OK:
                return []
            rows: list[Any] = await cursor.fetchall()
            return rows

    async def fetch_one(self, statement: TextClause, **params: Any) -> Any | None:
        """Run one statement in its own (implicit) transaction and return its first row."""
        rows = await self.fetch_all(statement, **params)
        return rows[0] if rows else None

    def _compiled(self, statement: TextClause) -> str:
        sql = self._sql_cache.get(statement)
        if sql is None:
            sql = str(statement.compile(dialect=self.engine.dialect))
            if self._translate is not None:
                sql = self._translate(sql)
            self._sql_cache[statement] = sql
        return sql

    async def ping(self) -> None:
        await self.fetch_one(q.PING)

    # --- accept -----------------------------------------------------------------------------

    async def accept_job(
        self,
        client_id: uuid.UUID,
        request: JobRequest,
        *,
        traceparent: str | None = None,
        throttle: Throttle | None = None,
    ) -> AcceptResult:
        """``traceparent``: the W3C trace context stored with a new job (core/telemetry_context.py).
        Not part of the request: a key's job keeps the one it was made with.

        The submissions that arrive together share one insert (group commit, ``_insert_group``):
        one statement, one commit and one WAL flush for all of them, each answered alone. One
        whose insert made nothing (its key held, or its unique key live) goes on alone from the
        read of what holds it (``accept_steps``); one whose group's statement failed on a row is
        accepted alone from the start, and meets its own error. A database gone, or an answer
        lost, is each one's as it is a single accept's: ``StoreUnavailable`` (the client
        retries with its key).

        ``throttle``: its type's throttle (None: none). A submission under a policy
        (``db/policed_accept.py``) is accepted in a transaction of its own; ``Throttled`` over
        the throttle, nothing written."""
        submission = Submission.of(request, traceparent)
        if is_policed(submission, throttle):
            async with self.fast_transaction() as rows:
                return await drive_async(
                    policed_accept_steps(client_id, submission, throttle), rows
                )
        try:
            made = await self._inserts.submit((client_id, submission))
        except StoreUnavailable:
            raise
        except Exception:  # a row of the group failed the statement: each alone, from the start
            return await self._accept(client_id, submission)
        if made is not None:
            return made
        # Its insert ran and made nothing: on from the read of what holds its key.
        steps = accept_steps(client_id, submission, inserted_nothing=True)
        return await drive_async(steps, self._rows)

    async def _insert_group(
        self, group: Sequence[tuple[uuid.UUID, Submission]]
    ) -> list[AcceptResult | None]:
        """One ACCEPT_JOBS for the submissions of ``group``: each one's new job, or None."""
        ids = [new_id() for _ in group]
        client_ids = [client_id for client_id, _ in group]
        submissions = [submission for _, submission in group]
        rows = await self.fetch_all(q.ACCEPT_JOBS, **many_params(ids, client_ids, submissions))
        made = {row.id: row for row in rows}
        return [
            None if job_id not in made else made_by_row(client_id, submission, made[job_id])
            for job_id, (client_id, submission) in zip(ids, group, strict=True)
        ]

    async def _accept(self, client_id: uuid.UUID, submission: Submission) -> AcceptResult:
        return await drive_async(accept_steps(client_id, submission), self._rows)

    async def _rows(self, statement: TextClause, params: dict[str, Any]) -> list[Any]:
        return await self.fetch_all(statement, **params)

    async def accept_jobs(
        self,
        client_id: uuid.UUID,
        requests: Sequence[JobRequest],
        *,
        traceparent: str | None = None,
        throttles: Mapping[str, Throttle] | None = None,
    ) -> list[AcceptResult | Throttled]:
        """Many submissions at once, each with the rules of ``accept_job``; one result per
        request, in order. The new jobs are written in one transaction: all of them or none,
        each with ``traceparent``. ``throttles``: the throttled types' throttles; a submission
        the throttle refuses gets its ``Throttled``. A batch with a submission under a policy
        is accepted item by item, in order, in the same one transaction
        (``_accept_policed_batch``)."""
        throttles = throttles or {}
        submissions = [Submission.of(request, traceparent) for request in requests]
        if any(is_policed(s, throttles.get(s.request.type)) for s in submissions):
            return await self._accept_policed_batch(client_id, submissions, throttles)
        fingerprints = [submission.fingerprint for submission in submissions]
        ids = [new_id() for _ in requests]
        keys = [request.idempotency_key for request in requests]
        async with self.transaction() as connection:
            inserted = {
                row.idempotency_key: row
                for row in await connection.execute(
                    q.ACCEPT_JOBS, many_params(ids, [client_id] * len(ids), submissions)
                )
            }
            # Keys that existed, or came twice in this batch: their jobs as they are now.
            existing = {
                row.idempotency_key: row
                for row in await connection.execute(
                    q.JOBS_BY_KEYS,
                    {
                        "client_id": client_id,
                        "idempotency_keys": [key for key in keys if key not in inserted],
                    },
                )
            }
        results: list[AcceptResult | None] = [None] * len(requests)
        position = {job_id: index for index, job_id in enumerate(ids)}
        for row in inserted.values():  # the items that made their key's job
            index = position[row.id]
            results[index] = made_by_row(client_id, submissions[index], row)
        for index, key in enumerate(keys):
            if results[index] is not None:
                continue
            if key in inserted:  # the key came again in this batch: the job just made
                maker = position[inserted[key].id]
                made = results[maker]
                assert made is not None
                decision = decide(fingerprints[maker], fingerprints[index])
                results[index] = AcceptResult.held(made.job, decision)
            elif key in existing:
                results[index] = held_by_row(existing[key], fingerprints[index])
            else:  # retention deleted the key's job meanwhile: the key is free again; or a live
                # job holds its unique key, which the single accept finds (deduplicated)
                results[index] = await self._accept(client_id, submissions[index])
        answers: list[AcceptResult | Throttled] = list(all_present(results))
        return answers

    async def _accept_policed_batch(
        self,
        client_id: uuid.UUID,
        submissions: Sequence[Submission],
        throttles: Mapping[str, Throttle],
    ) -> list[AcceptResult | Throttled]:
        """A batch with submissions under a policy: each item accepted in order, in one
        transaction, each policed one in a savepoint of its own (its locks stay held to the
        commit, as the batch's jobs are written together)."""
        results: list[AcceptResult | Throttled] = []
        async with self.transaction() as connection:
            execute = rows_on(connection)
            for submission in submissions:
                throttle = throttles.get(submission.request.type)
                steps = (
                    policed_accept_steps(client_id, submission, throttle)
                    if is_policed(submission, throttle)
                    else accept_steps(client_id, submission)
                )
                try:
                    async with connection.begin_nested():
                        results.append(await drive_async(steps, execute))
                except Throttled as refused:
                    results.append(refused)
        return results

    # --- reading ----------------------------------------------------------------------------

    async def get_job(
        self,
        job_id: uuid.UUID,
        *,
        client_id: uuid.UUID | None = None,
        steps: StepsShown | None = None,
    ) -> Job | None:
        """The job (of ``client_id``, None: any client's); ``steps``: with its recorded steps
        read in the same statement, ``"values"`` with their values (None: not read)."""
        row = await self.fetch_one(q.JOB_BY_ID, id=job_id, client_id=client_id, steps=steps)
        return None if row is None else job_from_row(row)

    async def steps_of(
        self, job_id: uuid.UUID, *, with_values: bool = False
    ) -> tuple[StepRecord, ...]:
        """The job's recorded steps, in order (their values only when asked: they can be large,
        and a view shows them only with ``?steps=values``)."""
        row = await self.fetch_one(q.STEPS_OF_JOB, job_id=job_id, with_values=with_values)
        return () if row is None or row.steps is None else steps_from_json(row.steps)

    async def signal_job(
        self,
        job_id: uuid.UUID,
        name: str,
        value: Any,
        *,
        client_id: uuid.UUID | None,
        idempotency_key: str | None = None,
    ) -> SignalAnswer:
        """Send a signal (``jobrelay_signal``: kept, and the job woken when it sleeps waiting
        for it). ``client_id`` None: any client's job (an admin); otherwise another client's
        job is ``UNKNOWN``."""
        row = await self.fetch_one(
            q.SEND_SIGNAL,
            job_id=job_id,
            name=name,
            value=json.dumps(value),
            idempotency_key=idempotency_key,
            client_id=client_id,
        )
        return SignalAnswer.UNKNOWN if row is None else SignalAnswer(row.status)

    async def job_events(self, job_id: uuid.UUID) -> list[JournalEntry]:
        return [journal_entry(row) for row in await self.fetch_all(q.JOB_EVENTS, job_id=job_id)]

    async def list_jobs(
        self,
        *,
        client_id: uuid.UUID,
        state: str | None,
        job_type: str | None,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[Job]:
        rows = await self.fetch_all(
            q.LIST_JOBS,
            client_id=client_id,
            state=state,
            type=job_type,
            limit=limit,
            after_created_at=after[0] if after else None,
            after_id=after[1] if after else None,
        )
        return [job_from_row(row) for row in rows]

    async def list_jobs_of_clients(
        self,
        client_ids: Sequence[uuid.UUID],
        *,
        state: str | None,
        job_type: str | None,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[Job]:
        """A page of the jobs of several clients, newest first (the operators' listings):
        each client's page, read through its own index, then merged."""
        found: list[Job] = []
        for client_id in client_ids:
            found += await self.list_jobs(
                client_id=client_id, state=state, job_type=job_type, limit=limit, after=after
            )
        found.sort(key=lambda job: (job.created_at, job.id), reverse=True)
        return found[:limit]

    async def cancel_job(
        self, job_id: uuid.UUID, *, client_id: uuid.UUID | None, detail: str
    ) -> CancelAnswer | None:
        """Cancel a queued or retrying job at once, or ask the worker of a running one to stop
        it (recorded once: asked again, the same answer). None: no such job (of this client),
        or it has finished. ``detail`` goes with the journal entry.

        Each statement is guarded on the states it expects. A job that moved between them
        (claimed, released, its retry scheduled) is tried again, until one of them matches or
        the job has finished: every other state is cancellable or running, and a job moves only
        so often, so the loop ends with the answer that holds."""
        arguments = {"id": job_id, "client_id": client_id, "detail": detail}
        while True:
            if await self._cancel_at_once(arguments):
                return CancelAnswer.CANCELLED
            if await self.fetch_one(q.REQUEST_CANCEL, **arguments) is not None:
                return CancelAnswer.REQUESTED
            job = await self.get_job(job_id, client_id=client_id)
            if job is None or job.state in TERMINAL_STATES:
                return None

    async def _cancel_at_once(self, arguments: dict[str, Any]) -> bool:
        """CANCEL_JOB, and the release of the job's sequence it unblocks, in one transaction
        under the sequence's lock (``TAKE_SEQUENCE_LOCKS``: none for a job without one)."""
        ids = {"ids": [arguments["id"]]}
        async with self.transaction() as connection:
            await connection.execute(q.TAKE_SEQUENCE_LOCKS, ids)
            if (await connection.execute(q.CANCEL_JOB, arguments)).first() is None:
                return False
            await connection.execute(q.RELEASE_SEQUENCES, ids)
            return True

    # --- stats ------------------------------------------------------------------------------

    async def stats(self, *, never_claimed_after_seconds: float = 300.0) -> SystemStats:
        async with self.transaction() as connection:  # one snapshot
            by_state = (await connection.execute(q.JOBS_BY_STATE)).all()
            backlog = (await connection.execute(q.OUTBOX_BACKLOG)).one()
            expired = (await connection.execute(q.EXPIRED_LEASES)).scalar_one()
            retrying = (await connection.execute(q.RETRYING_SUMMARY)).one()
            quarantined = (await connection.execute(q.QUARANTINED_BY_CODE)).all()
            failed = (await connection.execute(q.FAILED_BY_CODE)).all()
            never_claimed = (
                await connection.execute(
                    q.PUBLISHED_NEVER_CLAIMED, {"older_than_seconds": never_claimed_after_seconds}
                )
            ).scalar_one()
            redispatched = (await connection.execute(q.REDISPATCHED_RECENTLY)).scalar_one()
            blocks = (
                await connection.execute(
                    q.BROKER_BLOCKS, {"fresh_seconds": BROKER_BLOCK_FRESH_SECONDS}
                )
            ).all()
            paused = (await connection.execute(q.PAUSED_QUEUE_ROWS)).all()
            no_consumer = (await connection.execute(q.NO_CONSUMER_BY_TYPE)).all()
        oldest = backlog.oldest_due_seconds
        return SystemStats(
            jobs_by_state={row.state: row.n for row in by_state},
            outbox=OutboxBacklog(
                backlog.unpublished, backlog.due, float(oldest) if oldest is not None else None
            ),
            expired_leases=expired,
            retrying=RetryingSummary(retrying.n, retrying.next_due_at),
            quarantined_by_code={row.code: row.n for row in quarantined},
            failed_by_code={row.code: row.n for row in failed},
            published_never_claimed=never_claimed,
            published_never_claimed_after_seconds=never_claimed_after_seconds,
            redispatched_last_hour=redispatched,
            no_consumer={row.type: row.n for row in no_consumer},
            broker_blocks=[BrokerBlock(row.dispatcher, row.reason, row.since) for row in blocks],
            paused_queues=[PausedQueue(row.name, row.paused_at, row.paused_by) for row in paused],
        )

    async def finished_per_minute(self) -> list[FinishedMinute]:
        """Jobs finished (succeeded, quarantined) in each minute of the last hour, oldest first,
        sixty minutes whether or not any job finished in them."""
        return [
            FinishedMinute(row.minute, row.succeeded, row.quarantined)
            for row in await self.fetch_all(q.FINISHED_PER_MINUTE)
        ]

    async def console_key(self) -> bytes | None:
        """The console's signing key (migration 0006); None before that revision."""
        try:
            row = await self.fetch_one(q.CONSOLE_KEY)
        except UndefinedTable:
            return None
        return None if row is None else bytes(row.secret)

    # --- operations -------------------------------------------------------------------------

    async def trace(self, job_id: uuid.UUID) -> JobTrace | None:
        """Everything recorded about one job (summarized by ``core.trace.trace_document``)."""
        async with self.transaction() as connection:  # one snapshot for a consistent story
            row = (
                await connection.execute(
                    q.JOB_BY_ID, {"id": job_id, "client_id": None, "steps": None}
                )
            ).first()
            if row is None:
                return None
            client = (await connection.execute(q.CLIENT_NAME_OF_JOB, {"job_id": job_id})).first()
            outbox = (await connection.execute(q.OUTBOX_ROWS_OF_JOB, {"job_id": job_id})).all()
            events = (await connection.execute(q.JOB_EVENTS, {"job_id": job_id})).all()
            stored = (await connection.execute(q.RESULT_OF_JOB, {"job_id": job_id})).first()
            steps = (
                await connection.execute(q.STEPS_OF_JOB, {"job_id": job_id, "with_values": False})
            ).scalar_one()
            signals = (await connection.execute(q.SIGNALS_OF_JOB, {"job_id": job_id})).all()
        return JobTrace(
            job=replace(job_from_row(row), steps=steps_from_json(steps) if steps else ()),
            client_name=client.name if client else "?",
            outbox=[
                OutboxEntry(
                    o.id,
                    o.created_at,
                    o.available_at,
                    o.published_at,
                    o.publish_attempts,
                    o.last_error,
                )
                for o in outbox
            ],
            events=[journal_entry(e) for e in events],
            result=StoredResult(stored.result, stored.attempt, stored.created_at)
            if stored
            else None,
            signals=[SignalEntry(g.name, g.sent_at, g.taken_by, g.taken_at) for g in signals],
        )
