"""Job states and the one table of allowed transitions (docs/states.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    QUARANTINED = "quarantined"
    CANCELLED = "cancelled"
    # A job of a workflow whose parents have not all succeeded yet: no outbox row, never
    # claimed; the statement that stores its last parent's result queues it (docs/workflows.md).
    WAITING = "waiting"
    # A job whose handler sleeps, or waits for a signal or a child (docs/durable-execution.md):
    # no lease, no slot, no message on the queue; due again at its ``wake_at`` (an outbox row
    # due then), or woken by the transaction that sends its signal or finishes its child.
    SLEEPING = "sleeping"


class JobEvent(StrEnum):
    """Entries of the transition journal (``job_journal.event``: ``job_events`` rows, and the
    ``received``, ``published``, ``claimed`` and ``succeeded`` a job's rows tell)."""

    RECEIVED = "received"
    PUBLISHED = "published"
    CLAIMED = "claimed"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    # (``lease_renewed`` is no more: renewals were never journaled. The CHECK constraint of the
    # migrations, db/history.py, still allows it.)
    LEASE_EXPIRED = "lease_expired"
    STALE_COMPLETION_REJECTED = "stale_completion_rejected"
    RETRY_SCHEDULED = "retry_scheduled"
    SUCCEEDED = "succeeded"
    QUARANTINED = "quarantined"
    REPLAYED = "replayed"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"  # a consumer did not know the type; due again after a backoff
    REDISPATCHED = "redispatched"  # its message was provably missing and was published again
    CANCEL_REQUESTED = "cancel_requested"  # of a running job; its consumer cancels the handler
    # A delivery put back without a claim (its queue paused, its type or key at a limit): the
    # attempts are untouched and a new outbox row is due later (docs/flow-control.md).
    HELD = "held"
    # A waiting job of a workflow whose parents have all succeeded: queued, with its outbox row.
    PARENTS_SUCCEEDED = "parents_succeeded"
    # A job cancelled for a failed parent, waiting again: that parent was replayed.
    RESTORED = "restored"
    # Durable execution (docs/durable-execution.md): the job went to sleep (until when, or for
    # which signal or child), a signal was sent to it, it was woken before its time came (by its
    # signal, its child's end, or into its queue's pause).
    SLEEPING = "sleeping"
    SIGNALLED = "signalled"
    WOKE = "woke"
    # Order and submission policies (docs/flow-control.md): a job of a sequence let go (its
    # outbox row written) when the one ahead of it ended.
    RELEASED = "released"


class Lease(StrEnum):
    """What a transition out of `running` asks of the job's lease."""

    ANY = "any"
    LIVE = "live"  # unexpired (``lease_until`` after now)
    EXPIRED = "expired"  # its holder crashed or hung


@dataclass(frozen=True)
class Transition:
    """One named move of a job, written once: the statements of ``db/sql/*.sql`` are guarded on
    these fields (their ``-- makes:`` lines, ``queries.STATE_WRITES``, say which statement makes
    which move; tests/unit/test_transitions.py holds each guard to them), and the tests'
    in-memory store (``tests/support/consumer_fakes.py``) follows the same rules."""

    name: str
    source: frozenset[JobState]
    target: JobState | None  # None: the state is kept (only the due time moves)
    # The entries it adds to the job's journal, in order: ``job_events`` rows, except a claim's
    # and a success's, which the job's row tells (the view ``job_journal``, migration 0018).
    journal: tuple[JobEvent, ...]
    fenced: bool = False  # only the holder of the claim's lease token may make it
    lease: Lease = Lease.ANY  # asked of the lease when the job is `running`

    def allows(self, state: JobState, *, lease_expired: bool) -> bool:
        """May a job in ``state`` take this move (its lease token already checked)?"""
        if state not in self.source:
            return False
        if state is not JobState.RUNNING or self.lease is Lease.ANY:
            return True
        return lease_expired == (self.lease is Lease.EXPIRED)


# Due for a consumer (when their due time has come): the states a claim takes a job from. A
# sleeper's due time is its wake time; one woken early (a signal, a child) is queued first.
_DUE = frozenset({JobState.QUEUED, JobState.RETRYING, JobState.SLEEPING})
_QUEUED_OR_RETRYING = frozenset({JobState.QUEUED, JobState.RETRYING})
_ASLEEP = frozenset({JobState.SLEEPING})
_RUNNING = frozenset({JobState.RUNNING})
_DUE_OR_ABANDONED = _DUE | _RUNNING  # running only under an expired lease
_WAITING = frozenset({JobState.WAITING})

CLAIM = Transition("claim", _DUE, JobState.RUNNING, (JobEvent.CLAIMED,))
RECLAIM = Transition(
    "reclaim",
    _RUNNING,
    JobState.RUNNING,
    (JobEvent.LEASE_EXPIRED, JobEvent.CLAIMED),
    lease=Lease.EXPIRED,
)
COMPLETE = Transition(
    "complete", _RUNNING, JobState.SUCCEEDED, (JobEvent.SUCCEEDED,), fenced=True, lease=Lease.LIVE
)
RETRY = Transition(
    "retry", _RUNNING, JobState.RETRYING, (JobEvent.RETRY_SCHEDULED,), fenced=True, lease=Lease.LIVE
)
QUARANTINE = Transition(
    "quarantine",
    _RUNNING,
    JobState.QUARANTINED,
    (JobEvent.QUARANTINED,),
    fenced=True,
    lease=Lease.LIVE,
)


def _quarantine_unclaimed(name: str) -> Transition:
    """Quarantined without an attempt: waiting, or running under an expired lease."""
    target, journal = JobState.QUARANTINED, (JobEvent.QUARANTINED,)
    return Transition(name, _DUE_OR_ABANDONED, target, journal, lease=Lease.EXPIRED)


# No attempts left: quarantined instead of claimed (the consumer's claim, docs/life-of-a-job.md).
EXHAUST = _quarantine_unclaimed("exhaust")
# The broker dead-lettered the job's message on its own (x-delivery-limit).
DELIVERY_LIMIT = _quarantine_unclaimed("delivery_limit")
# A consumer that does not know the type puts the job back, due later; past the patience the
# same statement quarantines it instead (UNKNOWN_TYPE).
DEFER = Transition("defer", _DUE, None, (JobEvent.DEFERRED,))
UNKNOWN_TYPE = Transition("unknown_type", _DUE, JobState.QUARANTINED, (JobEvent.QUARANTINED,))
# A consumer puts a due job back without claiming it, its attempts untouched, because its queue
# is paused or its type (or key) is at a limit; a job whose lease expired is queued again
# (HOLD_ABANDONED, one statement with HOLD: HOLD_JOB).
HOLD = Transition("hold", _QUEUED_OR_RETRYING, None, (JobEvent.HELD,))
HOLD_ABANDONED = Transition(
    "hold_abandoned",
    _RUNNING,
    JobState.QUEUED,
    (JobEvent.LEASE_EXPIRED, JobEvent.HELD),
    lease=Lease.EXPIRED,
)
# A stopping consumer gives its job back; the attempt stays counted.
RELEASE = Transition("release", _RUNNING, JobState.QUEUED, (JobEvent.LEASE_EXPIRED,), fenced=True)
RESCUE = Transition(
    "rescue", _RUNNING, JobState.QUEUED, (JobEvent.LEASE_EXPIRED,), lease=Lease.EXPIRED
)
# A job that has not started: due, or waiting for its parents (a workflow's).
CANCEL = Transition("cancel", _DUE | _WAITING, JobState.CANCELLED, (JobEvent.CANCELLED,))
# A running job whose client asked to cancel it (``jobs.cancel_requested_at``): its worker
# stopped the handler, or its attempt failed with attempts left (no retry is scheduled).
CANCEL_RUNNING = Transition(
    "cancel_running",
    _RUNNING,
    JobState.CANCELLED,
    (JobEvent.CANCELLED,),
    fenced=True,
    lease=Lease.LIVE,
)
# A quarantined job its owner or an operator gives up on (docs/flow-control.md, "Sequences": it
# no longer blocks its sequence).
CANCEL_QUARANTINED = Transition(
    "cancel_quarantined",
    frozenset({JobState.QUARANTINED}),
    JobState.CANCELLED,
    (JobEvent.CANCELLED,),
)
REPLAY = Transition(
    "replay", frozenset({JobState.QUARANTINED}), JobState.QUEUED, (JobEvent.REPLAYED,)
)
# Durable execution (docs/durable-execution.md). A handler's sleep, or its wait for a signal or
# a child not there yet, ends its attempt: the job sleeps, its lease given up, and the attempt
# is not counted against it (``max_attempts`` grows by one, so attempt numbers stay unique).
SLEEP = Transition(
    "sleep", _RUNNING, JobState.SLEEPING, (JobEvent.SLEEPING,), fenced=True, lease=Lease.LIVE
)
# Woken before its wake time: the signal it waits for was sent (``jobrelay_signal``), the child
# it waits for finished (the fragment ``dependents_of``), or, due in a paused queue, held there
# as a queued job (HOLD_JOB).
WAKE = Transition("wake", _ASLEEP, JobState.QUEUED, (JobEvent.WOKE,))
# Workflows (docs/workflows.md). The statement that stores a parent's success queues each child
# whose parents have now all succeeded, with its outbox row.
PARENTS_SUCCEEDED = Transition(
    "parents_succeeded", _WAITING, JobState.QUEUED, (JobEvent.PARENTS_SUCCEEDED,)
)
# The statement that quarantines or cancels a job of a ``cancel_dependents`` workflow cancels
# every job waiting on it, directly or not (code ``dependency_failed``).
DEPENDENCY_FAILED = Transition(
    "dependency_failed", _WAITING, JobState.CANCELLED, (JobEvent.CANCELLED,)
)
# A replay of the failed parent brings those jobs back to waiting.
RESTORE = Transition(
    "restore", frozenset({JobState.CANCELLED}), JobState.WAITING, (JobEvent.RESTORED,)
)

ALL_TRANSITIONS: tuple[Transition, ...] = (
    CLAIM,
    RECLAIM,
    COMPLETE,
    RETRY,
    QUARANTINE,
    EXHAUST,
    DELIVERY_LIMIT,
    DEFER,
    UNKNOWN_TYPE,
    HOLD,
    HOLD_ABANDONED,
    RELEASE,
    RESCUE,
    CANCEL,
    CANCEL_RUNNING,
    CANCEL_QUARANTINED,
    REPLAY,
    PARENTS_SUCCEEDED,
    DEPENDENCY_FAILED,
    RESTORE,
    SLEEP,
    WAKE,
)

TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.QUARANTINED, JobState.CANCELLED}
)
