"""The relay's ports (docs/architecture.md) and the values that cross them: pure, no I/O
library.

The relay loop (``jobrelay.dispatcher.relay``) depends on these;
``jobrelay.db.relay_store.RelayStore`` and ``jobrelay.broker.publisher.Publisher`` implement them
on PostgreSQL and RabbitMQ, and ``jobrelay.dispatcher.fakes`` in memory for unit tests of the
loop's decisions. Adapters import this module, never a service.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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
    traceparent: str | None = None  # the job's trace context (core/tracecontext.py)


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

    async def mark_published(self, ids: Sequence[int]) -> int: ...

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
