"""The consumer's ports (docs/architecture.md): the broker ``Delivery`` it settles; the job
store's values a claim, a deferral and a final write answer with, and the ``ExecutionStore``
protocol.

``db/execution_store.py`` implements it on PostgreSQL; the tests' in-memory store
(``tests/support/consumer_fakes.py``) for the worker's unit tests. Both follow the transitions
of ``core/states.py``, and ``tests/integration/test_execution_store_contract.py`` runs the same
scenarios on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from jobrelay.core.flow import Limit
from jobrelay.core.jobs import Cancelled, Job, Outcome, Quarantine, RetryLater, Succeeded
from jobrelay.core.states import JobState


@dataclass(frozen=True)
class Claimed:
    job: Job
    lease_token: uuid.UUID
    reclaimed: bool
    """True when the job was `running` under an expired lease (its holder crashed or hung)."""


class Refusal(StrEnum):
    """Why a delivery did not claim its job."""

    UNKNOWN_JOB = "unknown_job"
    EXHAUSTED = "attempts_exhausted"  # quarantined now; the message must dead-letter
    DUPLICATE = "duplicate"  # finished, running under a live lease, or not yet due
    OTHER_TYPE = "other_type"  # the message named another type than the job's (nothing done)


@dataclass(frozen=True)
class Refused:
    reason: Refusal
    job: Job | None = None


class HoldReason(StrEnum):
    """Why a due job was put back without a claim (docs/flow-control.md)."""

    PAUSED = "queue_paused"  # the consumer's queue is paused
    CONCURRENCY = "concurrency_limit"  # its type (or key) runs as many jobs as its limit allows
    RATE = "rate_limit"  # its type (or key) started as many jobs as its rate allows


@dataclass(frozen=True)
class Held:
    """A due job put back without a claim, its attempts untouched: `queued` (or `retrying`)
    with a new outbox row due at ``available_at``, and a `held` event saying why."""

    reason: HoldReason
    available_at: datetime
    detail: str
    job: Job


ClaimResult = Claimed | Refused | Held


# How long a job found at its concurrency limit is held: a slot frees when a running job of
# its type (or key) ends, which the consumer cannot wait for, so it comes back soon, jittered.
HOLD_AT_LIMIT_SECONDS = (0.5, 2.0)


@dataclass(frozen=True)
class ClaimRules:
    """What a claim checks beyond the job's own state, besides the consumer's queue being open
    (which every claim re-checks).

    ``limited``: a limit is in force for the job's type (the code's, or a runtime row the
    consumer read): the claim runs, with the other limited claims that arrive together, in a
    transaction that takes the type's (or key's) slot and rate token exactly. Otherwise it goes
    in the group statement with the others, and a job of a type with a runtime limit the
    consumer has not read yet is claimed the exact way anyway.
    ``code_limit``: the registry's limit of the type (a runtime row wins over it).
    ``hold_seconds``: how long a job found at its concurrency limit is held."""

    limited: bool = False
    code_limit: Limit | None = None
    hold_seconds: float = 1.0


@dataclass(frozen=True)
class Deferred:
    """A job whose type the consumer does not know, put back without counting an attempt."""

    quarantined: bool  # the type stayed unknown past the patience: quarantined instead
    available_at: datetime
    unknown_since: datetime


DeferResult = Deferred | Refused


class Finish(StrEnum):
    WRITTEN = "written"
    ALREADY = "already"  # an earlier try of this very write committed; its answer was lost
    STALE = "stale"  # the lease is no longer ours: nothing written but the journal entry
    # Written as a cancel instead: a retry of a job whose client asked to cancel it while it
    # ran is not scheduled; the job is `cancelled`.
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class AttemptTrace:
    """What the finished attempts left on a job: its state, its attempts, and the attempt whose
    result is stored (None: no result)."""

    state: JobState
    attempts: int
    result_attempt: int | None


def already_done(trace: AttemptTrace, attempt: int, outcome: Outcome) -> bool:
    """Did this attempt's own write of ``outcome`` land earlier (its answer lost)? Attempt
    numbers are unique per claim; the one rule of ``Finish.ALREADY`` for every store."""
    match outcome:
        case Succeeded():
            return trace.result_attempt == attempt
        case RetryLater():
            # A retry ends the job cancelled instead when its cancel was requested.
            ended = (JobState.RETRYING, JobState.CANCELLED)
            return trace.state in ended and trace.attempts == attempt
        case Quarantine():
            return trace.state is JobState.QUARANTINED and trace.attempts == attempt
        case Cancelled():
            return trace.state is JobState.CANCELLED and trace.attempts == attempt
    return False  # pragma: no cover


def outcome_name(outcome: Outcome) -> str:
    """The write an outcome makes, as the journal names a rejected one."""
    match outcome:
        case Succeeded():
            return "completion"
        case RetryLater():
            return "retry"
        case Quarantine():
            return "quarantine"
        case Cancelled():
            return "cancel"
    return "outcome"  # pragma: no cover


class Renewal(StrEnum):
    """What a heartbeat's renewal found."""

    HELD = "held"  # extended
    CANCEL_REQUESTED = "cancel_requested"  # extended, and its client asked to cancel the job
    LOST = "lost"  # no longer ours (expired or taken over): nothing extended


class Delivery(Protocol):
    """What the worker needs of a broker delivery: the wrappers of ``broker/acks.py`` and
    ``broker/quarantine.py`` around ``broker/deliveries.py``'s ``RawDelivery``."""

    @property
    def body(self) -> bytes: ...

    @property
    def redelivered(self) -> bool | None: ...

    async def ack(self, multiple: bool = False) -> None: ...

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None: ...

    async def dead_letter_after_ack(self) -> None:
        """Put a copy of this message, acked already, in the quarantine as a dead-letter of it
        would: a long job acked early that ends quarantined (docs/long-jobs.md)."""
        ...


@dataclass(frozen=True)
class LeaseTerms:
    """The lease a worker asks for: the token that fences every write of its attempt, and how
    long the lease lasts unless renewed."""

    token: uuid.UUID
    seconds: float

    @classmethod
    def fresh(cls, seconds: float) -> LeaseTerms:
        return cls(uuid.uuid4(), seconds)


@dataclass(frozen=True)
class PutBack:
    """How a consumer that does not know a job's type puts the job back: due again after
    ``delay_seconds`` (for a consumer that knows it), or quarantined once the type stayed
    unknown for ``patience_seconds``."""

    job_type: str
    delay_seconds: float
    patience_seconds: float
    detail: str  # journaled with the deferral: which consumer put it back


class ForwardingDelivery:
    """A delivery that passes everything to ``inner``: the base of wrappers that change one
    way of settling (``broker/acks.py``, ``broker/quarantine.py``)."""

    def __init__(self, inner: Delivery) -> None:
        self.inner = inner

    @property
    def body(self) -> bytes:
        return self.inner.body

    @property
    def redelivered(self) -> bool | None:
        return self.inner.redelivered

    async def ack(self, multiple: bool = False) -> None:
        await self.inner.ack(multiple=multiple)

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await self.inner.nack(multiple=multiple, requeue=requeue)

    async def dead_letter_after_ack(self) -> None:
        await self.inner.dead_letter_after_ack()


@dataclass(frozen=True)
class ProgressReport:
    """A handler's latest ``context.progress`` of one running job (consumer/progress.py)."""

    job_id: uuid.UUID
    lease_token: uuid.UUID
    fraction: float
    message: str | None
    at: datetime

    def as_json(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "message": self.message, "at": self.at.isoformat()}


class ExecutionStore(Protocol):
    """What the worker asks of the store. Every method raises ``StoreUnavailable`` (from
    ``core/errors.py``) when the store cannot be reached."""

    async def claim(
        self,
        job_id: uuid.UUID,
        lease: LeaseTerms,
        *,
        detail: str | None = None,
        job_type: str | None = None,
        rules: ClaimRules | None = None,
    ) -> ClaimResult:
        """Claim the job for one attempt, or say why not (quarantining a job with no attempts
        left). Again with the same token after a lost answer: claimed. ``job_type``: claim it
        only if it is a job of that type (the one the caller can run), else ``OTHER_TYPE``
        with the job, untouched; None: any type. A due job of a paused queue, or at its type's
        limit (``rules``), is not claimed: it is ``Held``."""
        ...

    async def defer_unknown_type(self, job_id: uuid.UUID, put_back: PutBack) -> DeferResult:
        """Put a due job of a type this consumer does not know back, due after
        ``delay_seconds`` (attempts untouched), or quarantine it past the patience."""
        ...

    async def renew(self, job_id: uuid.UUID, lease: LeaseTerms) -> Renewal:
        """Extend the lease, and say whether a cancel of the job was requested (one
        statement); ``LOST`` when it is no longer ours (expired or taken over)."""
        ...

    async def cancel_requested(self, job_id: uuid.UUID, lease: LeaseTerms) -> bool:
        """Was a cancel of the job requested while this lease holds it? Read only: the
        heartbeat asks between renewals (False too when the lease is no longer ours: the next
        renewal finds that out)."""
        ...

    async def finish(
        self,
        job_id: uuid.UUID,
        *,
        lease_token: uuid.UUID,
        attempt: int,
        outcome: Outcome,
        related: bool = True,
        sequenced: bool = False,
    ) -> Finish:
        """Carry out a decided outcome once, fenced by the lease token (a retry of a job
        whose cancel was requested: cancelled instead, ``Finish.CANCELLED``). ``related``: the
        job may be a workflow's or a child (its claim row has a workflow or a parent), so its
        end moves other jobs; False, from the claim row, spares the finish that work.
        ``sequenced``: a job of a sequence (its claim row has a sequence key), whose end
        releases the next job of it in the same transaction."""
        ...

    async def release(self, job_id: uuid.UUID, *, lease_token: uuid.UUID, detail: str) -> bool:
        """Give a running job back (shutdown): `queued` again, the attempt still counted."""
        ...

    async def parent_results(self, job_id: uuid.UUID) -> dict[str, Any]:
        """A workflow's job: the results of the jobs it waited for, by ref (docs/workflows.md)."""
        ...

    async def report_progress(self, reports: Sequence[ProgressReport]) -> None:
        """Store each running job's latest progress, fenced by its lease token (a report of a
        job no longer held is dropped)."""
        ...
