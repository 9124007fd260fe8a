"""The relay's ports (docs/architecture.md) and the values that cross them: pure, no I/O
library.

The relay loop (``jobrelay.dispatcher.relay``) depends on these;
``jobrelay.db.relay_store.RelayStore`` and ``jobrelay.broker.publisher.Publisher`` implement them
on PostgreSQL and RabbitMQ, and the tests' ``tests/support/dispatcher_fakes.py`` in memory for
unit tests of the loop's decisions. Adapters import this module, never a service.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from jobrelay.core.flow import Limit
from jobrelay.core.states import JobState

# Why a publish did not succeed: label values of the failure metric and the prefix of
# ``outbox.last_error``.
NACKED = "nacked"
UNROUTABLE = "unroutable"
TIMEOUT = "timeout"
CONNECTION_LOST = "connection_lost"
CHANNEL_ERROR = "channel_error"
UNEXPECTED = "unexpected_error"
FAILURE_REASONS = (NACKED, UNROUTABLE, TIMEOUT, CONNECTION_LOST, CHANNEL_ERROR, UNEXPECTED)


@dataclass(frozen=True)
class OutboxRow:
    """One leased outbox row: what the message says and how often it was tried."""

    id: int
    job_id: uuid.UUID
    type: str
    publish_attempts: int
    traceparent: str | None = None  # the job's trace context (core/telemetry_context.py)
    # What its `published` journal entry says once confirmed, drawn by the lease so that the
    # entry reads before the claim it causes (db/sql/relay.sql); None from the fakes.
    journal_id: int | None = None
    leased_at: datetime | None = None
    delivers_attempt: int | None = None


@dataclass(frozen=True)
class QueuePick:
    """Lease at most ``limit`` due rows of the work queue ``queue`` (a short name, ``default``)
    in flow order: priority, then client turns, then due time (docs/flow-control.md)."""

    queue: str
    limit: int


@dataclass(frozen=True)
class FlowRules:
    """What the flow pick obeys besides the window: the routes of ``JOBRELAY_TYPE_QUEUES``
    (type → short queue name; every other type goes to ``default``) and the limit in force of
    every limited type (the runtime row, else the code's)."""

    routes: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, Limit] = field(default_factory=dict)


@dataclass(frozen=True)
class FlowControls:
    """The operators' controls as the database holds them now: the paused queues and the
    runtime limits (``type_limits``); and the types a running consumer serves
    (``job_types.served_until``), whose queues the relay window counts."""

    paused: frozenset[str] = frozenset()
    runtime_limits: Mapping[str, Limit] = field(default_factory=dict)
    served: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QueueDepth:
    """A work queue as the broker sees it: messages ready (published, not delivered) and
    consumers subscribed."""

    ready: int
    consumers: int


@dataclass(frozen=True)
class QueueFigures:
    """A work queue as the database sees it: due unpublished rows (``backlog``) and running
    jobs, with its pause."""

    name: str
    paused: bool
    backlog: int
    running: int


@dataclass(frozen=True)
class PublishOutcome:
    """The broker's answer for one row. ``reason`` None means confirmed."""

    row: OutboxRow
    reason: str | None = None
    detail: str = ""

    @property
    def confirmed(self) -> bool:
        return self.reason is None

    @property
    def error_text(self) -> str:
        """Safe text for ``outbox.last_error``: the reason and a short broker detail."""
        return f"{self.reason}: {self.detail}"[:500] if self.detail else str(self.reason)


class OutboxStore(Protocol):
    async def lease_batch(self, limit: int, lease_seconds: float) -> list[OutboxRow]: ...

    async def lease_picks(
        self, picks: Sequence[QueuePick], rules: FlowRules, lease_seconds: float
    ) -> list[OutboxRow]:
        """Lease due rows queue by queue in flow order, skipping paused queues' (no pick is
        asked for them), rows whose type and key are at their concurrency limit and types over
        their rate."""
        ...

    async def flow_controls(self) -> FlowControls: ...

    async def register_queues(self, names: Sequence[str]) -> None:
        """Add these work queues to ``queues`` (an existing one is kept as it is)."""

    async def queue_backlogs(self, routes: Mapping[str, str]) -> dict[str, int]:
        """Due, unpublished (and not leased) rows per work queue."""
        ...

    async def mark_published(self, rows: Sequence[OutboxRow]) -> int:
        """Record the confirmed rows (as leased) published, each with its journal entry."""
        ...

    async def mark_failed(
        self, ids: Sequence[int], error: str, retry_in_seconds: float
    ) -> None: ...

    async def next_due_in(self) -> float | None: ...

    async def oldest_due_age(self) -> float: ...

    async def rescue_expired_leases(self, limit: int) -> list[uuid.UUID]: ...

    async def delete_published(self, retention_seconds: float, limit: int) -> int: ...

    async def fold_job_counts(self) -> int: ...

    async def report_broker_block(self, dispatcher: str, reason: str) -> None:
        """Say (again) that the broker blocks this dispatcher, for the stats."""

    async def clear_broker_block(self, dispatcher: str) -> None: ...

    async def delete_finished_jobs(
        self, state: JobState, retention_seconds: float, limit: int
    ) -> int: ...


class QueueDepths(Protocol):
    async def depths(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        """The broker's figures of these work queues (short names); a queue the broker does
        not have is left out. Raises ``BrokerUnavailable``."""
        ...

    async def close(self) -> None: ...


class MessagePublisher(Protocol):
    @property
    def ready(self) -> bool:
        """True while a confirming channel is open: ``connect()`` would return at once."""
        ...

    @property
    def blocked_reason(self) -> str | None:
        """Why the broker blocks publishing (a resource alarm), or None while it does not."""
        ...

    async def wait_unblocked(self) -> None:
        """Returns once publishing is no longer blocked (at once when it is not)."""

    async def connect(self) -> None:
        """Make sure a confirming channel is open; raises ``BrokerUnavailable``."""

    async def publish_batch(self, rows: Sequence[OutboxRow]) -> list[PublishOutcome]:
        """Publish every row (pipelined) and return one outcome per row, in order. Two calls
        may run at once (the relay leases and publishes a batch while the previous one waits
        for its confirms)."""
        ...

    async def close(self) -> None: ...
