"""The dispatcher's side of the database: lease outbox rows, record publish outcomes, rescue
expired leases, prune old rows.

Every method is one short transaction (one statement), so the dispatcher never holds a row lock
or a snapshot while it waits for the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextClause

from jobrelay.core.relay import OutboxRow
from jobrelay.core.states import JobState
from jobrelay.db import queries as q
from jobrelay.db.store import Store


class RelayStore:
    """Implements ``jobrelay.core.relay.OutboxStore`` on PostgreSQL."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def lease_batch(self, limit: int, lease_seconds: float) -> list[OutboxRow]:
        rows = await self.store.fetch_all(
            q.LEASE_OUTBOX_BATCH, limit=limit, lease_seconds=lease_seconds
        )
        leased = [
            OutboxRow(
                id=row.id,
                job_id=row.job_id,
                type=row.type,
                publish_attempts=row.publish_attempts,
                traceparent=row.traceparent,
            )
            for row in rows
        ]
        leased.sort(key=lambda row: row.id)
        return leased

    async def mark_published(self, ids: Sequence[int]) -> int:
        if not ids:
            return 0
        rows = await self.store.fetch_all(q.MARK_PUBLISHED, ids=list(ids))
        return len(rows)

    async def mark_failed(self, ids: Sequence[int], error: str, retry_in_seconds: float) -> None:
        if not ids:
            return
        async with self.store.transaction() as connection:
            await connection.execute(
                q.MARK_PUBLISH_FAILED,
                {"ids": list(ids), "error": error, "retry_in_seconds": retry_in_seconds},
            )

    async def next_due_in(self) -> float | None:
        """Seconds until the earliest unpublished row is due (negative: overdue); None: none."""
        row = await self.store.fetch_one(q.NEXT_OUTBOX_DUE_IN)
        return None if row is None or row.seconds is None else float(row.seconds)

    async def oldest_due_age(self) -> float:
        row = await self.store.fetch_one(q.OLDEST_DUE_OUTBOX_AGE)
        return 0.0 if row is None or row.seconds is None else float(row.seconds)

    async def rescue_expired_leases(self, limit: int) -> list[uuid.UUID]:
        rows = await self.store.fetch_all(q.RESCUE_EXPIRED_LEASES, limit=limit)
        return [row.job_id for row in rows]

    async def delete_published(self, retention_seconds: float, limit: int) -> int:
        return await self._delete(
            q.DELETE_PUBLISHED_OUTBOX, retention_seconds=retention_seconds, limit=limit
        )

    async def fold_job_counts(self) -> int:
        """Fold the finished-job count deltas into the totals; returns how many (state, code)
        totals changed."""
        return len(await self.store.fetch_all(q.FOLD_JOB_COUNTS))

    async def report_broker_block(self, dispatcher: str, reason: str) -> None:
        await self.store.fetch_all(q.REPORT_BROKER_BLOCK, dispatcher=dispatcher, reason=reason)

    async def clear_broker_block(self, dispatcher: str) -> None:
        await self.store.fetch_all(q.CLEAR_BROKER_BLOCK, dispatcher=dispatcher)

    async def delete_finished_jobs(
        self, state: JobState, retention_seconds: float, limit: int
    ) -> int:
        return await self._delete(
            q.DELETE_FINISHED_JOBS,
            state=state.value,
            retention_seconds=retention_seconds,
            limit=limit,
        )

    async def _delete(self, statement: TextClause, **params: Any) -> int:
        async with self.store.transaction() as connection:
            return int((await connection.execute(statement, params)).rowcount)
