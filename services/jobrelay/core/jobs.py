"""The job as a frozen value, and the outcome of one attempt decided as a pure function."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from jobrelay.core.bounds import MAX_DELAY_SECONDS
from jobrelay.core.durable import StepRecord
from jobrelay.core.errors import HandlerError, PermanentError
from jobrelay.core.failures import MESSAGE_MAX_BYTES, Failure, cut_head, describe_failure
from jobrelay.core.journal import QuarantineMarker
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay_client.flow import (
    Flow as Flow,
    OnDuplicate as OnDuplicate,
    PolicyOptions as PolicyOptions,
    is_policy_seconds as is_policy_seconds,
    is_valid_flow_key as is_valid_flow_key,
    is_valid_idempotency_key as is_valid_idempotency_key,
)

# ``jobs.last_error``: what the job's owner reads (the code is beside it, in last_error_code).
SAFE_ERROR_MAX = MESSAGE_MAX_BYTES


@dataclass(frozen=True)
class Job:
    id: uuid.UUID
    client_id: uuid.UUID
    idempotency_key: str
    type: str
    payload: Any
    state: JobState
    attempts: int
    max_attempts: int
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    lease_token: uuid.UUID | None = None
    lease_until: datetime | None = None
    last_error_code: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None
    run_at: datetime | None = None
    """The due time the submission asked for; None: due at once."""

    cancel_requested_at: datetime | None = None
    """A cancel asked while it ran: its consumer cancels the handler."""

    traceparent: str | None = None
    """The W3C trace context of its accept (core/telemetry_context.py); None: not traced."""

    priority: int = 0
    """Higher runs first (docs/flow-control.md)."""

    concurrency_key: str | None = None
    """The value a per-key limit of its type counts it under; None: none."""

    unique_key: str | None = None
    """While it is live, no other job of its client and type has this key; None: none."""

    workflow_id: uuid.UUID | None = None
    """The workflow it is a job of (docs/workflows.md); None: none."""

    workflow_ref: str | None = None
    """Its name within that workflow."""

    progress: dict[str, Any] | None = None
    """What its handler last reported: ``{"fraction", "message", "at"}``; None: nothing."""

    no_consumer: bool | None = None
    """Waiting, and no running consumer serves its type (docs/job-types.md, "Where a job
    goes"); read by the single job's view only, None elsewhere."""

    replayed_attempts: int = 0
    """The attempts it used before its latest replay (0: never replayed). ``attempts`` counts
    every claim of its life, so attempt numbers stay unique per job; a replay starts a new run,
    whose attempts and budget are counted from here (docs/states.md)."""

    wake_at: datetime | None = None
    """Sleeping (docs/durable-execution.md): when it is due again; None while it waits for a
    signal or a child with no deadline, and in every other state."""

    waiting_for: dict[str, str] | None = None
    """Sleeping: what it waits for, ``{"signal": name}`` or ``{"child": id}``; None: its time
    (``wake_at``) only, or not sleeping. (The column is ``jobs.waiting_on``.)"""

    parent_job_id: uuid.UUID | None = None
    """The job that started it with ``context.run_child`` or ``start_child``; None: none."""

    sequence_key: str | None = None
    """Its sequence (docs/flow-control.md, "Sequences"): it runs after the jobs of its client
    and key accepted before it; None: none."""

    blocked_by: uuid.UUID | None = None
    """Waiting in a sequence behind a quarantined job: that job; read by the single job's view
    only, None elsewhere."""

    steps: tuple[StepRecord, ...] | None = None
    """What it recorded (``job_steps``), in order; read by the claim (a handler's durable calls
    find them there) and the single job's view only, None elsewhere."""

    @property
    def run_attempt(self) -> int:
        """The number of its latest attempt within its run (since its latest replay)."""
        return self.attempts - self.replayed_attempts

    @property
    def run_max_attempts(self) -> int:
        """The attempts its run may use (its type's budget once replayed)."""
        return self.max_attempts - self.replayed_attempts


@dataclass(frozen=True)
class QuarantinedJob:
    """A quarantined job as the quarantine sweep reads it (``broker/quarantine.py::plan_sweep``):
    when, and what its message in the quarantine queue says."""

    job_id: uuid.UUID
    job_type: str
    quarantined_at: datetime
    outbox_id: int | None  # its latest outbox row (the message_id of its messages), if kept
    traceparent: str | None = None


@dataclass(frozen=True)
class JobRequest:
    """What a client asks for: a job of ``type`` with ``payload`` and an attempt budget, under
    its idempotency key, due at once, at ``run_at`` or ``delay_seconds`` after it is accepted
    (at most one of them). The API, the client, ``jobrelay.enqueue``, the scheduler and the
    tests all submit one."""

    idempotency_key: str
    type: str
    payload: Any
    max_attempts: int
    run_at: datetime | None = None
    delay_seconds: float | None = None
    flow: Flow = Flow()
    """Priority and keys as the submission gave them: these are fingerprinted."""

    defaults: Flow = Flow()
    """What its type gives for those the submission did not (``Registry.flow_defaults``):
    the job gets them, the fingerprint does not see them, so a type's new default does not
    turn a resubmission into a conflict."""

    def __post_init__(self) -> None:
        if self.run_at is not None and self.delay_seconds is not None:
            raise ValueError("run_at and delay_seconds exclude each other")
        if self.run_at is not None and self.run_at.utcoffset() is None:
            raise ValueError("run_at needs a time zone offset")
        if self.delay_seconds is not None and not 0 <= self.delay_seconds <= MAX_DELAY_SECONDS:
            raise ValueError(f"delay_seconds is 0 to {MAX_DELAY_SECONDS}")
        flow = self.job_flow
        if flow.is_policed or flow.debounce_max_seconds is not None:
            flow.check_policies(scheduled=self.schedule is not None)

    @property
    def schedule(self) -> dict[str, Any] | None:
        """When it asked to run, as the idempotency fingerprint sees it (None: at once). A delay
        is fingerprinted as asked, not as the time it came to: the same request retried later
        is still the same request."""
        if self.run_at is not None:
            return {"run_at": self.run_at.astimezone(UTC).isoformat()}
        if self.delay_seconds is not None:
            return {"delay_seconds": self.delay_seconds}
        return None

    @property
    def job_flow(self) -> Flow:
        """The priority and keys the job gets: the submission's, else its type's."""
        return self.flow.over(self.defaults)

    @property
    def priority(self) -> int:
        return self.job_flow.priority or 0

    def as_new_job(
        self,
        job_id: uuid.UUID,
        client_id: uuid.UUID,
        *,
        at: datetime,
        available_at: datetime | None = None,
        traceparent: str | None = None,
    ) -> Job:
        """The job just accepted for it at ``at``: queued, no attempt yet, due at
        ``available_at`` (at once when None), stored with ``traceparent``."""
        due = available_at or at
        return Job(
            job_id,
            client_id,
            self.idempotency_key,
            self.type,
            self.payload,
            JobState.QUEUED,
            attempts=0,
            max_attempts=self.max_attempts,
            available_at=due,
            created_at=at,
            updated_at=at,
            # A debounce decides its due time itself (docs/flow-control.md).
            run_at=due
            if self.schedule is not None or self.job_flow.debounce_seconds is not None
            else None,
            traceparent=traceparent,
            priority=self.priority,
            concurrency_key=self.job_flow.concurrency_key,
            unique_key=self.job_flow.unique_key,
            sequence_key=self.job_flow.sequence_key,
        )


@dataclass(frozen=True)
class JournalEntry:
    """One row of a job's journal (``job_events``): a transition or a notable delivery, and the
    attempt it belongs to. The one shape the store, the trace and the API read."""

    at: datetime
    event: str
    attempt: int
    detail: str | None
    error: dict[str, Any] | None = None  # a failed attempt's {"class", "message", "traceback"}


def safe_error_text(error: BaseException, mask: Callable[[str], str] | None = None) -> str:
    """The message fit for ``jobs.last_error``: known secrets masked, at most 2 KiB.

    A ``HandlerError``'s message was written for this purpose and stands alone; any other
    exception is named by its class before its message (``RuntimeError: …``).
    """
    return _last_error(error, describe_failure(error, mask))


def _last_error(error: BaseException, failure: Failure) -> str:
    if isinstance(error, HandlerError):
        return failure.message or error.code
    return cut_head(failure.summary(), SAFE_ERROR_MAX)


# --- the outcome of an attempt ------------------------------------------------------------------


@dataclass(frozen=True)
class Succeeded:
    result: dict[str, Any]


@dataclass(frozen=True)
class RetryLater:
    """Due again ``delay_seconds`` after the store writes it: the store adds the delay to the
    database's clock (``FINISH_JOBS``), never to the consumer's."""

    delay_seconds: float
    error_code: str
    error: str
    failure: Failure | None = None  # stored with the attempt's journal entry


@dataclass(frozen=True)
class Quarantine:
    reason_code: str
    error: str
    failure: Failure | None = None


@dataclass(frozen=True)
class Cancelled:
    """Its client asked to cancel the job while it ran, and the handler was stopped (or had
    not started): no result is kept, no retry scheduled."""


Outcome = Succeeded | RetryLater | Quarantine | Cancelled


class CancelAnswer(StrEnum):
    """What a client's cancel (``POST /v1/jobs/{id}/cancel``) did to its job."""

    CANCELLED = "cancelled"  # it was queued or retrying: cancelled now
    REQUESTED = "requested"  # it is running: its worker stops the handler (asked now or before)


class SignalAnswer(StrEnum):
    """What sending a signal did (``POST /v1/jobs/{id}/signals/{name}``, ``jobrelay_signal``)."""

    SENT = "sent"  # kept; the job woke if it was asleep waiting for it
    REPEATED = "repeated"  # its idempotency key was used for this job before: nothing new kept
    FINISHED = "finished"  # the job has finished: nothing kept
    UNKNOWN = "unknown"  # no such job (of this client)


def decide_outcome(
    *,
    attempt: int,
    max_attempts: int,
    result: dict[str, Any] | None,
    error: BaseException | None,
    policy: RetryPolicy,
    rng: random.Random | None = None,
    mask: Callable[[str], str] | None = None,
) -> Outcome:
    """What one finished attempt means; the caller stores it once. No clock: a retry is a
    delay, which the store adds to the database's clock.

    ``mask`` removes known secrets from the error's message and traceback.
    """
    if error is None:
        return Succeeded(result if result is not None else {})
    failure = describe_failure(error, mask)
    code = error.code if isinstance(error, HandlerError) else "unexpected_error"
    text = _last_error(error, failure)
    if isinstance(error, PermanentError):
        return Quarantine(reason_code=code, error=text, failure=failure)
    if attempt >= max_attempts:
        return Quarantine(
            reason_code=QuarantineMarker.ATTEMPTS_EXHAUSTED,
            error=cut_head(f"{code}: {text}", SAFE_ERROR_MAX),
            failure=failure,
        )
    return RetryLater(
        delay_seconds=policy.delay(attempt, rng), error_code=code, error=text, failure=failure
    )
