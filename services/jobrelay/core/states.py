"""Job states and the one table of allowed transitions (SPEC §3)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    QUARANTINED = "quarantined"
    CANCELLED = "cancelled"


class JobEvent(StrEnum):
    """Entries of the transition journal (``job_events.event``)."""

    RECEIVED = "received"
    PUBLISHED = "published"
    CLAIMED = "claimed"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    LEASE_RENEWED = "lease_renewed"
    LEASE_EXPIRED = "lease_expired"
    STALE_COMPLETION_REJECTED = "stale_completion_rejected"
    RETRY_SCHEDULED = "retry_scheduled"
    SUCCEEDED = "succeeded"
    QUARANTINED = "quarantined"
    REPLAYED = "replayed"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"  # a consumer did not know the type; due again after a backoff
    REDISPATCHED = "redispatched"  # its message was provably missing and was published again


# Every allowed move, written once. The SQL statements guard on the same source states.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RETRYING: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.RETRYING,
            JobState.QUARANTINED,
            JobState.QUEUED,  # rescue after an expired lease
            JobState.RUNNING,  # re-claim of an expired lease by another worker
        }
    ),
    JobState.QUARANTINED: frozenset({JobState.QUEUED}),  # operator replay
    JobState.SUCCEEDED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.QUARANTINED, JobState.CANCELLED}
)
CANCELLABLE_STATES: frozenset[JobState] = frozenset(
    source for source, targets in TRANSITIONS.items() if JobState.CANCELLED in targets
)


def can_transition(source: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[source]
