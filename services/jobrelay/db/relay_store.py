"""The dispatcher's side of the database: lease outbox rows, record publish outcomes, rescue
expired leases, prune old rows.

Every method is one short transaction (one statement), so the dispatcher never holds a row lock
or a snapshot while it waits for the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import TextClause

from jobrelay.core.flow import Limit
from jobrelay.core.relay import FlowControls, FlowRules, OutboxRow, QueuePick
from jobrelay.core.states import JobState
from jobrelay.core.topology import DEFAULT_QUEUE_NAME
from jobrelay.db import queries as q
from jobrelay.db.rows import limit_from_row
from jobrelay.db.store import Store

# With per-key limits, how far past the batch size a client's pick looks for rows whose key is
# not at its limit (docs/flow-control.md).
LOOKAHEAD = 4


def route_params(routes: Mapping[str, str]) -> dict[str, list[str]]:
    """JOBRELAY_TYPE_QUEUES (type → short queue name) as the two arrays the statements join."""
    return {"route_types": list(routes), "route_queues": list(routes.values())}


def queue_params(queue: str, routes: Mapping[str, str]) -> dict[str, Any]:
    """The types LEASE_FLOW_PICK takes for ``queue``: those routed there, and for ``default``
    every type not routed elsewhere."""
    return {
        "queue_types": [t for t, routed in routes.items() if routed == queue],
        "other_types": [t for t, routed in routes.items() if routed != DEFAULT_QUEUE_NAME],
        "is_default": queue == DEFAULT_QUEUE_NAME,
    }


def flow_limit_params(limits: Mapping[str, Limit]) -> dict[str, list[Any]]:
    """The limits in force as LEASE_FLOW_PICK's arrays; ``burst``: at most one period's rate
    taken in one pick."""
    return {
        "limit_types": list(limits),
        "limit_concurrency": [limit.concurrency for limit in limits.values()],
        "limit_burst": [
            None if limit.rate is None else limit.rate.count for limit in limits.values()
        ],
        "per_key_types": [t for t, limit in limits.items() if limit.per_key],
    }


def _leased(rows: Sequence[Any], *, in_order: bool = False) -> list[OutboxRow]:
    """The leased rows as values, by outbox id unless ``in_order`` (the flow pick's order)."""
    leased = [
        OutboxRow(
            id=row.id,
            job_id=row.job_id,
            type=row.type,
            publish_attempts=row.publish_attempts,
            traceparent=row.traceparent,
            journal_id=row.journal_id,
            leased_at=row.leased_at,
            delivers_attempt=row.delivers_attempt,
        )
        for row in rows
    ]
    if not in_order:
        leased.sort(key=lambda row: row.id)
    return leased


class RelayStore:
    """Implements ``jobrelay.core.relay.OutboxStore`` on PostgreSQL."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def lease_batch(self, limit: int, lease_seconds: float) -> list[OutboxRow]:
        rows = await self.store.fetch_all(
            q.LEASE_OUTBOX_BATCH, limit=limit, lease_seconds=lease_seconds
        )
        return _leased(rows)

    async def lease_picks(
        self, picks: Sequence[QueuePick], rules: FlowRules, lease_seconds: float
    ) -> list[OutboxRow]:
        """One LEASE_FLOW_PICK per queue (each its own short transaction); with limits in force,
        LEASE_FLOW_PICK_LIMITED."""
        limits = flow_limit_params(rules.limits)
        statement = q.LEASE_FLOW_PICK_LIMITED if rules.limits else q.LEASE_FLOW_PICK
        leased: list[OutboxRow] = []
        for pick in picks:
            if pick.limit <= 0:
                continue
            rows = await self.store.fetch_all(
                statement,
                limit=pick.limit,
                lookahead=pick.limit * LOOKAHEAD if rules.limits else pick.limit,
                lease_seconds=lease_seconds,
                **queue_params(pick.queue, rules.routes),
                **limits,
            )
            rows.sort(key=lambda row: (-row.priority, row.turn, row.due_at, row.id))
            leased += _leased(rows, in_order=True)
        return leased

    async def flow_controls(self) -> FlowControls:
        paused: set[str] = set()
        served: set[str] = set()
        runtime: dict[str, Limit] = {}
        for row in await self.store.fetch_all(q.FLOW_CONTROLS):
            if row.kind == "paused":
                paused.add(row.name)
            elif row.kind == "served":
                served.add(row.name)
            else:
                runtime[row.name] = limit_from_row(row)
        return FlowControls(frozenset(paused), runtime, frozenset(served))

    async def register_queues(self, names: Sequence[str]) -> None:
        await self.store.fetch_all(q.REGISTER_QUEUES, names=sorted(set(names)))

    async def queue_backlogs(self, routes: Mapping[str, str]) -> dict[str, int]:
        rows = await self.store.fetch_all(q.QUEUE_BACKLOGS, **route_params(routes))
        return {row.queue: int(row.n) for row in rows}

    async def mark_published(self, rows: Sequence[OutboxRow]) -> int:
        if not rows:
            return 0
        marked = await self.store.fetch_all(
            q.MARK_PUBLISHED,
            ids=[row.id for row in rows],
            journal_ids=[row.journal_id for row in rows],
            attempts=[row.delivers_attempt for row in rows],
            leased_at=[row.leased_at for row in rows],
        )
        return len(marked)

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
        rows = await self.store.fetch_all(
            q.RESCUE_EXPIRED_LEASES,
            limit=limit,
            type=None,
            except_id=None,
            per_key=False,
            key="",
            detail="lease expired; rescued by dispatcher",
        )
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
