"""The database side of periodic schedules: the scheduler's client, the database's clock, and
the job of a tick, made through the ordinary idempotent accept (``Store.accept_job``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from jobrelay.core.jobs import Job, JobRequest
from jobrelay.core.schedules import SCHEDULER_CLIENT, MadeJob
from jobrelay.db import queries as q
from jobrelay.db.store import Store, job_from_row


class ScheduleStore:
    """Implements ``jobrelay.dispatcher.scheduler.SchedulerStore`` on PostgreSQL."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def scheduler_client_id(self) -> uuid.UUID | None:
        """The id of the client ``jobrelay-scheduler``; None before migration 0005."""
        row = await self.store.fetch_one(q.SCHEDULER_CLIENT_ID, name=SCHEDULER_CLIENT)
        return None if row is None else row.id

    async def now(self) -> datetime:
        row = await self.store.fetch_one(q.DATABASE_NOW)
        assert row is not None
        now: datetime = row.now
        return now

    async def make_job(self, client_id: uuid.UUID, request: JobRequest) -> MadeJob:
        accepted = await self.store.accept_job(client_id, request)
        return MadeJob(accepted.job.id, created=accepted.created, conflict=accepted.conflict)

    async def job_by_key(self, client_id: uuid.UUID, key: str) -> Job | None:
        row = await self.store.fetch_one(q.JOB_BY_KEY, client_id=client_id, idempotency_key=key)
        return None if row is None else job_from_row(row)
