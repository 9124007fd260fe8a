"""Operator actions over both sides of the quarantine: the jobs' recorded reasons in
PostgreSQL and the dead-lettered messages in RabbitMQ. Used by the CLI and the admin API."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection

from jobrelay.broker import quarantine
from jobrelay.broker.quarantine import QuarantinedMessage
from jobrelay.core.errors import BrokerUnavailable, UnknownJobType
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings, mask_url
from jobrelay.core.states import JobState
from jobrelay.db.store import Store

Progress = Callable[[int, int], None]
REPLAY_CHUNK = 200


@dataclass(frozen=True)
class ReplayOutcome:
    job_id: uuid.UUID
    status: str  # replayed | not_found | not_quarantined
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": str(self.job_id), "status": self.status, "state": self.state}


class Operations:
    def __init__(self, store: Store, settings: Settings, registry: Registry) -> None:
        self.store = store
        self.settings = settings
        self.registry = registry

    @asynccontextmanager
    async def broker(self) -> AsyncIterator[AbstractConnection]:
        try:
            connection = await aio_pika.connect(self.settings.amqp_url, timeout=10)
        except Exception as error:
            raise BrokerUnavailable(
                f"broker unavailable at {mask_url(self.settings.amqp_url)}: {type(error).__name__}"
            ) from None
        try:
            yield connection
        finally:
            await connection.close()

    # --- reading ------------------------------------------------------------------------------

    async def messages(self) -> list[QuarantinedMessage]:
        async with self.broker() as connection:
            return await quarantine.peek(connection)

    async def reconcile(self, messages: list[QuarantinedMessage]) -> int:
        """Jobs whose message the broker dead-lettered on its own become quarantined."""
        marked = 0
        for message in messages:
            if message.reason == "delivery_limit" and message.job_id is not None:
                error = f"the broker dead-lettered the message after {message.deaths} death(s)"
                if await self.store.quarantine_delivery_limited(message.job_id, error=error):
                    marked += 1
        return marked

    async def quarantine_report(
        self, *, code: str | None = None, limit: int = 100
    ) -> dict[str, Any]:
        """The quarantined jobs with their reasons and messages, and the messages of no job."""
        messages = await self.messages()
        reconciled = await self.reconcile(messages)
        jobs = await self.store.quarantined_jobs(code=code, limit=limit)
        by_job: dict[uuid.UUID | None, list[dict[str, Any]]] = {}
        for message in messages:
            by_job.setdefault(message.job_id, []).append(message.as_dict())
        listed = {job.id for job in jobs}
        return {
            "jobs": [
                {
                    "job_id": str(job.id),
                    "type": job.type,
                    "reason": job.last_error_code,
                    "error": job.last_error,
                    "attempts": job.attempts,
                    "max_attempts": job.max_attempts,
                    "quarantined_at": job.finished_at.isoformat() if job.finished_at else None,
                    "messages": by_job.get(job.id, []),
                }
                for job in jobs
            ],
            "other_messages": [
                message.as_dict() for message in messages if message.job_id not in listed
            ],
            "messages_in_queue": len(messages),
            "reconciled_delivery_limit": reconciled,
        }

    async def show(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        trace = await self.store.trace(job_id)
        if trace is None:
            return None
        messages = [m.as_dict() for m in await self.messages() if m.job_id == job_id]
        return {"trace": trace, "messages": messages}

    # --- acting -------------------------------------------------------------------------------

    def replay_budget(self, job_type: str) -> int:
        try:
            return self.registry.max_attempts_for(job_type, self.settings.max_attempts)
        except UnknownJobType:
            return self.settings.max_attempts

    async def replay(
        self, job_ids: list[uuid.UUID], *, progress: Progress | None = None
    ) -> list[ReplayOutcome]:
        """Back to queued with a fresh budget and a new outbox row; then the job's messages
        leave the quarantine queue. Replaying a job that is not quarantined changes nothing."""
        outcomes: list[ReplayOutcome] = []
        for start in range(0, len(job_ids), REPLAY_CHUNK):
            chunk = job_ids[start : start + REPLAY_CHUNK]
            outcomes += [await self._replay_one(job_id) for job_id in chunk]
            if progress:
                progress(len(outcomes), len(job_ids))
        replayed = [o.job_id for o in outcomes if o.status == "replayed"]
        if replayed:
            async with self.broker() as connection:
                await quarantine.remove_jobs(connection, replayed)
        return outcomes

    async def _replay_one(self, job_id: uuid.UUID) -> ReplayOutcome:
        job = await self.store.get_job(job_id)
        if job is None:
            return ReplayOutcome(job_id, "not_found")
        if job.state != JobState.QUARANTINED:
            return ReplayOutcome(job_id, "not_quarantined", job.state.value)
        budget = self.replay_budget(job.type)
        if await self.store.replay_job(job_id, budget=budget, detail="replayed by an operator"):
            return ReplayOutcome(job_id, "replayed", JobState.QUEUED.value)
        current = await self.store.get_job(job_id)
        return ReplayOutcome(job_id, "not_quarantined", current.state.value if current else None)

    async def replay_all(
        self, *, code: str | None = None, progress: Progress | None = None
    ) -> list[ReplayOutcome]:
        await self.reconcile(await self.messages())
        return await self.replay(await self.store.quarantined_ids(code=code), progress=progress)

    async def purge(self) -> int:
        """Delete every message in the quarantine queue. The jobs stay quarantined (and
        replayable): only the broker's copies go."""
        async with self.broker() as connection:
            return await quarantine.purge(connection)

    async def redispatch(
        self, *, older_than_seconds: float, progress: Progress | None = None
    ) -> int:
        """New outbox rows for jobs published long ago and never claimed. A duplicate message
        is harmless (the claim is guarded); a lost one is not."""
        total = 0
        while True:
            batch = await self.store.redispatch_stranded(
                older_than_seconds=older_than_seconds, limit=500
            )
            total += len(batch)
            if progress:
                progress(total, total)
            if len(batch) < 500:
                return total
