"""In-memory implementations of the relay's ports (``jobrelay.core.relay``), for fast tests
of the loop's decisions.

``InMemoryOutbox`` runs the same scenarios as ``db/relay_store.py::RelayStore`` in
``tests/integration/test_outbox_store_contract.py``; what it does not model is listed there.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from jobrelay.core.errors import BrokerUnavailable, StoreUnavailable
from jobrelay.core.relay import (
    FlowControls,
    FlowRules,
    OutboxRow,
    PublishOutcome,
    QueueDepth,
    QueuePick,
)
from jobrelay.core.states import JobState


@dataclass
class FakeRow:
    id: int
    job_id: uuid.UUID
    type: str
    due_at: float = 0.0
    published_at: float | None = None  # on the outbox's clock; retention reads it
    publish_attempts: int = 0
    last_error: str | None = None

    @property
    def published(self) -> bool:
        return self.published_at is not None


@dataclass
class InMemoryOutbox:
    """The outbox with a hand-driven clock (``now``) and an ``unavailable`` switch that every
    method obeys, as every RelayStore statement raises StoreUnavailable without its database."""

    now: float = 0.0
    rows: dict[int, FakeRow] = field(default_factory=dict)
    unavailable: bool = False
    failed_calls: list[tuple[list[int], str, float]] = field(default_factory=list)
    broker_blocks: dict[str, str] = field(default_factory=dict)
    controls: FlowControls = field(default_factory=FlowControls)
    queues: set[str] = field(default_factory=set)
    due_asks: int = 0  # calls of next_due_in
    # Ids as a sequence hands them out: never one again, even after retention deleted rows.
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def add(self, job_type: str = "demo.sleep", *, due_in: float = 0.0) -> FakeRow:
        row = FakeRow(next(self._ids), uuid.uuid4(), job_type, self.now + due_in)
        self.rows[row.id] = row
        return row

    def _check(self) -> None:
        if self.unavailable:
            raise StoreUnavailable("database unavailable (fake)")

    async def lease_batch(self, limit: int, lease_seconds: float) -> list[OutboxRow]:
        self._check()
        due = sorted(
            (r for r in self.rows.values() if not r.published and r.due_at <= self.now),
            key=lambda r: r.due_at,
        )[:limit]
        # The earliest due are leased, and returned by id, as RelayStore returns them.
        return self._lease(sorted(due, key=lambda r: r.id), lease_seconds)

    def _lease(self, rows: Sequence[FakeRow], lease_seconds: float) -> list[OutboxRow]:
        for row in rows:
            row.due_at = self.now + lease_seconds
            row.publish_attempts += 1
        return [OutboxRow(r.id, r.job_id, r.type, r.publish_attempts) for r in rows]

    async def lease_picks(
        self, picks: Sequence[QueuePick], rules: FlowRules, lease_seconds: float
    ) -> list[OutboxRow]:
        """Oldest first per queue, paused and limits aside (the order and the limits are the
        SQL's, tested against PostgreSQL)."""
        self._check()
        leased: list[OutboxRow] = []
        for pick in picks:
            if pick.limit <= 0:  # no room (RelayStore asks nothing; a slice [:-1] would lease)
                continue
            due = sorted(
                (
                    r
                    for r in self.rows.values()
                    if not r.published
                    and r.due_at <= self.now
                    and rules.routes.get(r.type, "default") == pick.queue
                ),
                key=lambda r: r.due_at,
            )[: pick.limit]
            leased += self._lease(due, lease_seconds)
        return leased

    async def flow_controls(self) -> FlowControls:
        self._check()
        return self.controls

    async def register_queues(self, names: Sequence[str]) -> None:
        self._check()
        self.queues.update(names)

    async def queue_backlogs(self, routes: Mapping[str, str]) -> dict[str, int]:
        self._check()
        backlogs: dict[str, int] = {}
        for row in self.rows.values():
            if not row.published and row.due_at <= self.now:
                queue = routes.get(row.type, "default")
                backlogs[queue] = backlogs.get(queue, 0) + 1
        return backlogs

    async def mark_published(self, rows: Sequence[OutboxRow]) -> int:
        self._check()
        found = (self.rows.get(r.id) for r in rows)  # a row deleted meanwhile counts nothing
        marked = [row for row in found if row is not None and not row.published]
        for row in marked:
            row.published_at, row.last_error = self.now, None
        return len(marked)

    async def mark_failed(self, ids: Sequence[int], error: str, retry_in_seconds: float) -> None:
        self._check()
        self.failed_calls.append((list(ids), error, retry_in_seconds))
        for row in (self.rows.get(i) for i in ids):
            if row is not None and not row.published:
                row.last_error = error
                row.due_at = self.now + retry_in_seconds

    async def next_due_in(self) -> float | None:
        self._check()
        self.due_asks += 1
        pending = [r.due_at - self.now for r in self.rows.values() if not r.published]
        return min(pending) if pending else None

    async def oldest_due_age(self) -> float:
        self._check()
        due = [self.now - r.due_at for r in self.rows.values() if not r.published]
        return max([0.0, *due])

    async def rescue_expired_leases(self, limit: int) -> list[uuid.UUID]:
        self._check()
        return []

    async def delete_published(self, retention_seconds: float, limit: int) -> int:
        self._check()
        cutoff = self.now - retention_seconds
        old = [
            r.id
            for r in self.rows.values()
            if r.published_at is not None and r.published_at < cutoff
        ]
        for row_id in old[:limit]:
            del self.rows[row_id]
        return len(old[:limit])

    async def fold_job_counts(self) -> int:
        self._check()
        return 0

    async def report_broker_block(self, dispatcher: str, reason: str) -> None:
        self._check()
        self.broker_blocks[dispatcher] = reason

    async def clear_broker_block(self, dispatcher: str) -> None:
        self._check()
        self.broker_blocks.pop(dispatcher, None)

    async def delete_finished_jobs(
        self, state: JobState, retention_seconds: float, limit: int
    ) -> int:
        self._check()
        return 0


@dataclass
class FakeDepths:
    """The broker's ready counts by queue, as a test sets them."""

    ready: dict[str, int] = field(default_factory=dict)
    reads: int = 0  # how often the counts were asked for

    async def depths(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        self.reads += 1
        return {queue: QueueDepth(self.ready.get(queue, 0), 0) for queue in queues}

    async def close(self) -> None:
        pass


@dataclass
class FakePublisher:
    """Confirms everything, except routing keys listed in ``failures`` (key → reason)."""

    failures: dict[str, str] = field(default_factory=dict)
    reachable: bool = True
    published: list[OutboxRow] = field(default_factory=list)
    connects: int = 0
    blocked_reason: str | None = None
    _unblocked: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ready(self) -> bool:
        return self.reachable and self.connects > 0

    def block(self, reason: str = "low on memory") -> None:
        self.blocked_reason = reason
        self._unblocked.clear()

    def unblock(self) -> None:
        self.blocked_reason = None
        self._unblocked.set()

    async def wait_unblocked(self) -> None:
        if self.blocked_reason is not None:
            await self._unblocked.wait()

    async def connect(self) -> None:
        self.connects += 1
        if not self.reachable:
            raise BrokerUnavailable("broker unavailable (fake)")

    async def publish_batch(self, rows: Sequence[OutboxRow]) -> list[PublishOutcome]:
        outcomes = []
        for row in rows:
            reason = self.failures.get(row.type)
            if reason is None:
                self.published.append(row)
            outcomes.append(PublishOutcome(row, reason, "fake" if reason else ""))
        return outcomes

    async def close(self) -> None:
        pass
