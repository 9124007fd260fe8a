"""What ``jobrelay stats`` and ``GET /v1/admin/stats`` report: the system at one instant.

The store reads a ``SystemStats`` in one snapshot; ``as_document`` is the shape both the API and
the CLI's ``--json`` show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobrelay.core.states import JobState


@dataclass(frozen=True)
class OutboxBacklog:
    unpublished: int
    due: int
    oldest_due_age_seconds: float | None


@dataclass(frozen=True)
class RetryingSummary:
    count: int
    next_due_at: datetime | None


@dataclass(frozen=True)
class BrokerBlock:
    """A dispatcher the broker blocks from publishing (a resource alarm), since when and why."""

    dispatcher: str
    reason: str
    since: datetime


@dataclass(frozen=True)
class PausedQueue:
    """A work queue paused by an operator (``jobrelay queues pause``): since when, by whom."""

    name: str
    since: datetime
    by: str | None


# A block report older than this is a dispatcher that stopped while blocked: not shown.
BROKER_BLOCK_FRESH_SECONDS = 60.0


@dataclass(frozen=True)
class SystemStats:
    jobs_by_state: dict[str, int]  # states without jobs may be absent
    outbox: OutboxBacklog
    expired_leases: int  # running jobs whose lease has expired
    retrying: RetryingSummary
    quarantined_by_code: dict[str, int]
    failed_by_code: dict[str, int]
    published_never_claimed: int
    published_never_claimed_after_seconds: float
    # Messages published again because they were lost (the dispatcher's self-healing and
    # `jobs redispatch`), over the last hour.
    redispatched_last_hour: int
    broker_blocks: list[BrokerBlock] = field(default_factory=list)
    paused_queues: list[PausedQueue] = field(default_factory=list)
    # Waiting jobs of the types no running consumer runs, by type (docs/job-types.md).
    no_consumer: dict[str, int] = field(default_factory=dict)

    def as_document(self) -> dict[str, Any]:
        next_due = self.retrying.next_due_at
        return {
            "jobs_by_state": {state.value: 0 for state in JobState} | self.jobs_by_state,
            "outbox": {
                "unpublished": self.outbox.unpublished,
                "due": self.outbox.due,
                "oldest_due_age_seconds": self.outbox.oldest_due_age_seconds,
            },
            "expired_leases": self.expired_leases,
            "retrying": {
                "count": self.retrying.count,
                "next_due_at": next_due.isoformat() if next_due else None,
            },
            "quarantined_by_code": self.quarantined_by_code,
            "failed_by_code": self.failed_by_code,
            "published_never_claimed": self.published_never_claimed,
            "published_never_claimed_after_seconds": self.published_never_claimed_after_seconds,
            "redispatched_last_hour": self.redispatched_last_hour,
            "broker_blocks": [
                {"dispatcher": b.dispatcher, "reason": b.reason, "since": b.since.isoformat()}
                for b in self.broker_blocks
            ],
            "paused_queues": [
                {"name": p.name, "since": p.since.isoformat(), "by": p.by}
                for p in self.paused_queues
            ],
            "no_consumer": self.no_consumer,
        }


@dataclass(frozen=True)
class FinishedMinute:
    """Jobs that finished in one minute of the last hour, by how they ended (the console's
    chart): ``quarantined`` are the failures no retry fixed."""

    minute: datetime
    succeeded: int
    quarantined: int
