"""What the client returns: the API's job and workflow views as typed, frozen values."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    # Fields a newer API adds are ignored, so that an older client keeps working.
    model_config = ConfigDict(frozen=True, extra="ignore")


class JobLinks(_Answer):
    self: str
    events: str


class Progress(_Answer):
    """What a running handler last reported (``context.progress``): 0 to 1, and when."""

    fraction: float
    message: str | None = None
    at: datetime


class Step(_Answer):
    """One step a durable handler recorded (docs/durable-execution.md): ``kind`` is ``step``,
    ``sleep``, ``signal`` or ``child``; ``status`` ``done``, ``waiting`` or ``timed_out``;
    ``value`` only when read with ``steps="values"``."""

    name: str
    kind: str
    status: str
    at: datetime
    attempt: int
    wake_at: datetime | None = None
    child_id: uuid.UUID | None = None
    value: Any = None


class Job(_Answer):
    """One job as the API shows it (``GET /v1/jobs/{id}``). ``state`` is one of ``waiting``
    (a workflow's job whose parents have not all succeeded), ``queued``, ``running``,
    ``sleeping`` (a durable handler's sleep, or its wait for a signal or a child),
    ``retrying``, ``succeeded``, ``quarantined``, ``cancelled``; ``result`` is set once it
    succeeded. ``wake_at``, ``waiting_for`` (``{"signal": name}``, ``{"child": id}``) and
    ``steps`` (the single job's read only) are a durable handler's."""

    id: uuid.UUID
    type: str
    state: str
    idempotency_key: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    available_at: datetime
    run_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    finished_at: datetime | None = None
    lease_until: datetime | None = None
    last_error_code: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None
    priority: int = 0
    concurrency_key: str | None = None
    unique_key: str | None = None
    deduplicated: bool = False
    """True when a job of the same type and unique key (live, or ended within the
    submission's ``unique_for_seconds``) answered the submission: this job is that one, and
    the submission made none (docs/flow-control.md)."""
    debounced: bool = False
    """True when the submission's debounce gave its payload and a later start to this job,
    the key's queued one, and made none."""
    sequence_key: str | None = None
    blocked_by: uuid.UUID | None = None
    """Waiting in its sequence behind this quarantined job (the single job's read only)."""
    workflow_id: uuid.UUID | None = None
    progress: Progress | None = None
    wake_at: datetime | None = None
    waiting_for: dict[str, str] | None = None
    parent_job_id: uuid.UUID | None = None
    steps: list[Step] | None = None
    links: JobLinks

    @property
    def finished(self) -> bool:
        """Succeeded, quarantined or cancelled: it will not change again by itself."""
        return self.state in FINISHED_STATES


FINISHED_STATES = frozenset({"succeeded", "quarantined", "cancelled"})


class Signal(_Answer):
    """What ``Client.signal`` did: ``status`` ``sent`` (kept; the job woke if it slept waiting
    for it) or ``repeated`` (its key was used for this job before: nothing new kept)."""

    job_id: uuid.UUID
    name: str
    status: str


class BatchItemAnswer(_Answer):
    status: int
    job: Job | None = None
    error: dict[str, Any] | None = None


class BatchAnswer(_Answer):
    results: list[BatchItemAnswer]


class JobPage(_Answer):
    """One page of ``GET /v1/jobs``; ``Client.jobs`` follows ``next_cursor`` itself."""

    items: list[Job]
    next_cursor: str | None = None


class WorkflowJob(_Answer):
    """One job of a workflow as its view shows it; ``after`` names the refs it waits for."""

    id: uuid.UUID
    type: str
    state: str
    after: list[str] = []
    last_error_code: str | None = None
    progress: Progress | None = None


class WorkflowView(_Answer):
    """A workflow as the API shows it (``GET /v1/workflows/{id}``). ``state`` is ``running``,
    ``succeeded`` (every job did), ``failed`` (a job is quarantined and nothing else can run)
    or ``cancelled``; ``jobs`` maps each ref to its job, in the order they were submitted;
    ``counts`` is how many jobs are in each state."""

    id: uuid.UUID
    state: str
    on_failure: str
    created_at: datetime
    cancelled_at: datetime | None = None
    jobs: dict[str, WorkflowJob]
    counts: dict[str, int] = {}
