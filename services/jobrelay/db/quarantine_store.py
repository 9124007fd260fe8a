"""The database side of the quarantine's keeper and of the self-healing of lost messages.

Two advisory locks serialize what must not interleave across processes:

- ``QUARANTINE_LOCK_KEY`` is held by everything in jobrelay that takes messages out of the
  quarantine queue without acking them (listing, replaying, purging, the dispatcher's sweep).
  Such a holder sees the whole queue only while no other holds part of it: a replay that missed
  a message held by a concurrent listing would leave it behind. The chaos checks take it too.
- ``HEAL_LOCK_KEY`` makes one dispatcher at a time publish lost messages again, so that two
  dispatchers that both saw an empty queue do not both add a copy.

Both are transaction-scoped: COMMIT, ROLLBACK or a dropped connection releases them, so a holder
that crashed never keeps one.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

import psycopg.errors
from sqlalchemy import exc as sa_exc

from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.jobs import Job, QuarantinedJob
from jobrelay.core.message import Envelope
from jobrelay.core.states import JobState
from jobrelay.db import queries as q
from jobrelay.db.rows import job_from_row
from jobrelay.db.store import Store

QUARANTINE_LOCK_KEY = 7_526_411_283_891_137_001
HEAL_LOCK_KEY = 7_526_411_283_891_137_002
# How long an operator's command waits for a sweep or a replay that holds the quarantine.
LOCK_WAIT_SECONDS = 120.0


class QuarantineBusy(BrokerUnavailable):
    """Another process held the quarantine queue for longer than the wait: try again."""


class QuarantineStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @asynccontextmanager
    async def exclusive(self, *, wait_seconds: float | None) -> AsyncIterator[bool]:
        """Hold the quarantine lock for the block. ``wait_seconds`` None: do not wait, and
        yield False when another process holds it; else wait that long, then raise
        ``QuarantineBusy``."""
        async with self.store.transaction() as connection:
            if wait_seconds is None:
                locked = (
                    await connection.execute(q.TRY_ADVISORY_XACT_LOCK, {"key": QUARANTINE_LOCK_KEY})
                ).scalar_one()
            else:
                await connection.execute(
                    q.SET_LOCK_TIMEOUT, {"timeout": f"{max(1, int(wait_seconds * 1000))}ms"}
                )
                try:
                    await connection.execute(q.ADVISORY_XACT_LOCK, {"key": QUARANTINE_LOCK_KEY})
                except sa_exc.OperationalError as error:
                    if isinstance(error.orig, psycopg.errors.LockNotAvailable):
                        raise QuarantineBusy(
                            "the quarantine queue is busy (a replay or a sweep holds it); try again"
                        ) from None
                    raise
                locked = True
            yield bool(locked)

    async def job_states(self, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, JobState]:
        if not ids:
            return {}
        rows = await self.store.fetch_all(q.JOB_STATES, ids=list(ids))
        return {row.id: JobState(row.state) for row in rows}

    async def quarantined_without_message(
        self, held: Collection[uuid.UUID], *, limit: int
    ) -> tuple[list[QuarantinedJob], datetime | None]:
        """The quarantined jobs (oldest quarantine first, ``limit`` at most) whose ids are not
        in ``held``, and the database's clock when read (None when there is none)."""
        rows = await self.store.fetch_all(
            q.QUARANTINED_WITHOUT_MESSAGE, held=list(held), limit=limit
        )
        jobs = [
            QuarantinedJob(row.id, row.type, row.finished_at, row.outbox_id, row.traceparent)
            for row in rows
        ]
        return jobs, rows[0].read_at if rows else None

    async def quarantined_count(self) -> int:
        row = await self.store.fetch_one(q.QUARANTINED_COUNT)
        return 0 if row is None else int(row.n)

    async def replay_job(
        self, job_id: uuid.UUID, *, budget: int, detail: str, reset_steps: bool = False
    ) -> bool:
        """Quarantined → queued with ``budget`` fresh attempts and a new outbox row.
        ``reset_steps``: in the same transaction, its recorded steps go and the signals its
        waits took are untaken again (signals.sql, reset_steps), so the new run starts over;
        without it, the new run goes on from its recorded steps."""
        arguments = {"id": job_id, "budget": budget, "detail": detail}
        if not reset_steps:
            return await self.store.fetch_one(q.REPLAY_JOB, **arguments) is not None
        async with self.store.transaction() as connection:
            replayed = (await connection.execute(q.REPLAY_JOB, arguments)).first()
            if replayed is not None:
                await connection.execute(q.RESET_STEPS, {"job_id": job_id})
        return replayed is not None

    async def quarantined_jobs(self, *, code: str | None, limit: int) -> list[Job]:
        rows = await self.store.fetch_all(q.LIST_QUARANTINED, code=code, limit=limit)
        return [job_from_row(row) for row in rows]

    async def quarantined_ids(self, *, code: str | None) -> list[uuid.UUID]:
        return [row.id for row in await self.store.fetch_all(q.QUARANTINED_IDS, code=code)]

    async def quarantine_delivery_limited(self, job_id: uuid.UUID, *, error: str) -> bool:
        """The broker dead-lettered the job's message on its own: quarantined, unless it moved."""
        row = await self.store.fetch_one(q.QUARANTINE_DELIVERY_LIMITED, id=job_id, error=error)
        return row is not None

    async def redispatch_stranded(
        self, *, older_than_seconds: float, limit: int, detail: str = "redispatched by an operator"
    ) -> list[uuid.UUID]:
        rows = await self.store.fetch_all(
            q.REDISPATCH_STRANDED, older_than_seconds=older_than_seconds, limit=limit, detail=detail
        )
        return [row.job_id for row in rows]

    async def stranded_types(self, *, older_than_seconds: float, limit: int) -> list[str]:
        """The types that have stranded jobs (``queries.STRANDED_TYPES``)."""
        rows = await self.store.fetch_all(
            q.STRANDED_TYPES, older_than_seconds=older_than_seconds, limit=limit
        )
        return [row.type for row in rows]

    async def heal_lost_messages(
        self,
        *,
        older_than_seconds: float,
        default_empty: bool,
        own_types: Sequence[str],
        empty_own_types: Sequence[str],
        cap: int,
        limit: int,
        detail: str,
    ) -> list[Envelope] | None:
        """New outbox rows for the stranded jobs routed to the queues seen empty (see
        ``queries.HEAL_LOST_MESSAGES``): the messages to be published again. None when another
        dispatcher is doing it right now."""
        async with self.store.transaction() as connection:
            locked = (
                await connection.execute(q.TRY_ADVISORY_XACT_LOCK, {"key": HEAL_LOCK_KEY})
            ).scalar_one()
            if not locked:
                return None
            rows = (
                await connection.execute(
                    q.HEAL_LOST_MESSAGES,
                    {
                        "older_than_seconds": older_than_seconds,
                        "default_empty": default_empty,
                        "own_types": list(own_types),
                        "empty_own_types": list(empty_own_types),
                        "cap": cap,
                        "limit": limit,
                        "detail": detail,
                    },
                )
            ).all()
        return [Envelope(row.job_id, row.type) for row in rows]
