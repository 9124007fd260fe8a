"""Request and response models: they are also the OpenAPI document."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jobrelay.core.bounds import (
    FLOW_KEY_MAX,
    IDEMPOTENCY_KEY_MAX,
    MAX_ATTEMPTS_MAX,
    MAX_DELAY_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    TYPE_NAME_MAX,
)
from jobrelay.core.clients import ClientListing
from jobrelay.core.durable import StepKind, StepRecord, StepStatus
from jobrelay.core.errors import InvalidSchedule
from jobrelay.core.flow import Limit, Throttle
from jobrelay.core.jobs import Flow, Job, JobRequest, OnDuplicate
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.runtime_limits import (
    CONCURRENCY_MAX,
    check_rate,
    check_throttle,
    runtime_limit,
)
from jobrelay.core.states import JobState
from jobrelay.core.workflows import OnFailure, WorkflowState, WorkflowView

# Query text reaches SQL parameters, and PostgreSQL text cannot hold a NUL character.
NO_NUL = r"^[^\x00]*$"


class SubmitJob(BaseModel):
    """The generic shape; the OpenAPI document narrows it per registered type (``payload``
    documented by each type's own schema, ``api.openapi``)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=TYPE_NAME_MAX, examples=["catalog.export"])
    payload: dict[str, Any] = Field(default_factory=dict, examples=[{"course": "JavaScript"}])
    # Strict: JSON true is not an attempt count (lax mode would read it as 1).
    max_attempts: int | None = Field(None, ge=1, le=MAX_ATTEMPTS_MAX, strict=True)
    run_at: datetime | None = Field(
        None,
        description="Not published before this time (RFC 3339 with an offset); "
        "not with delay_seconds",
        examples=["2026-12-24T18:00:00+01:00"],
    )
    delay_seconds: float | None = Field(
        None,
        ge=0,
        le=MAX_DELAY_SECONDS,
        description="Not published before this many seconds from now; not with run_at",
    )
    # Flow control (docs/flow-control.md); each is part of the idempotency fingerprint.
    priority: int | None = Field(
        None,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        strict=True,
        description="Higher runs first; by default the type's priority, else 0",
    )
    concurrency_key: str | None = Field(
        None,
        min_length=1,
        max_length=FLOW_KEY_MAX,
        pattern=NO_NUL,
        description="What a per-key limit of the type counts this job under; by default "
        "from the type's concurrency_key function, if any",
    )
    unique_key: str | None = Field(
        None,
        min_length=1,
        max_length=FLOW_KEY_MAX,
        pattern=NO_NUL,
        description="While a job of yours of this type and unique key is queued, running or "
        "retrying, the submission answers that job (200, deduplicated) and makes none",
    )
    # Order and submission policies (docs/flow-control.md); each fingerprinted when given.
    sequence_key: str | None = Field(
        None,
        min_length=1,
        max_length=FLOW_KEY_MAX,
        pattern=NO_NUL,
        description="Your jobs of one sequence key, of any types, run one at a time in the "
        "order they were accepted; a quarantined one blocks the rest until it is replayed "
        "and succeeds, or is cancelled",
    )
    unique_for_seconds: float | None = Field(
        None,
        gt=0,
        le=MAX_DELAY_SECONDS,
        description="With unique_key: also a job of the key that ended (not cancelled) this "
        "many seconds ago or less answers the submission",
    )
    on_duplicate: OnDuplicate | None = Field(
        None,
        description="With unique_key: return_existing (the default: 200, deduplicated) or "
        "reject (409 duplicate_job naming the job)",
    )
    debounce_seconds: float | None = Field(
        None,
        gt=0,
        le=MAX_DELAY_SECONDS,
        description="With unique_key: while the key's job is queued and has not started, "
        "this submission replaces its payload and moves its start to now + this (200, "
        "debounced); no run_at or delay_seconds",
    )
    debounce_max_seconds: float | None = Field(
        None,
        gt=0,
        le=MAX_DELAY_SECONDS,
        description="With debounce_seconds: a debounce never moves the start later than this "
        "many seconds after the job's first submission",
    )
    throttle_key: str | None = Field(
        None,
        min_length=1,
        max_length=FLOW_KEY_MAX,
        pattern=NO_NUL,
        description="What the type's throttle counts this submission under; by default from "
        "the type's throttle_key function, else the type's one count",
    )

    @field_validator("max_attempts", "priority", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        """3.0 is the integer 3 (JSON Schema counts it an integer, and a payload's 1.0 is read
        as one); 3.5 and true stay refused by the strict check."""
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("payload")
    @classmethod
    def _storable(cls, payload: dict[str, Any]) -> dict[str, Any]:
        problem = unstorable_json(payload)
        if problem is not None:
            raise ValueError(problem)
        return payload

    def as_request(
        self, idempotency_key: str, max_attempts: int, *, defaults: Flow | None = None
    ) -> JobRequest:
        """The request for the store, with its type's ``defaults`` (``Registry.flow_defaults``);
        ``InvalidSchedule`` for both due times, or a ``run_at`` without an offset (its time
        would depend on the server's zone); a ``ValueError`` for policies that do not go
        together (``Flow.check_policies``)."""
        if self.run_at is not None and self.delay_seconds is not None:
            raise InvalidSchedule("give run_at or delay_seconds, not both")
        if self.run_at is not None and self.run_at.utcoffset() is None:
            raise InvalidSchedule("run_at needs an offset, e.g. 2026-12-24T18:00:00Z")
        return JobRequest(
            idempotency_key,
            self.type,
            self.payload,
            max_attempts,
            run_at=self.run_at,
            delay_seconds=self.delay_seconds,
            flow=self.flow,
            defaults=defaults or Flow(),
        )

    @property
    def flow(self) -> Flow:
        """Its flow control fields as the job's request carries them."""
        return Flow(
            self.priority,
            self.concurrency_key,
            self.unique_key,
            sequence_key=self.sequence_key,
            unique_for_seconds=self.unique_for_seconds,
            on_duplicate=self.on_duplicate,
            debounce_seconds=self.debounce_seconds,
            debounce_max_seconds=self.debounce_max_seconds,
            throttle_key=self.throttle_key,
        )


# The fields of a submission beside its type and payload (api/openapi.py documents them in
# each type's own variant).
SUBMISSION_OPTIONS = (
    "max_attempts",
    "run_at",
    "delay_seconds",
    "priority",
    "concurrency_key",
    "unique_key",
    "sequence_key",
    "unique_for_seconds",
    "on_duplicate",
    "debounce_seconds",
    "debounce_max_seconds",
    "throttle_key",
)

MAX_BATCH_JOBS = 1000


class BatchItem(SubmitJob):
    """One job of a batch: a submission with its own idempotency key."""

    idempotency_key: str = Field(
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        description="As the Idempotency-Key header of one job",
    )


class SubmitBatch(BaseModel):
    """``POST /v1/jobs/batch``: each item is checked on its own (``BatchItem``), so one bad
    item is answered alone and the others go on."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=MAX_BATCH_JOBS,
        description="1 to 1,000 jobs, each a BatchItem (#/components/schemas/BatchItem). An "
        "item that is not one is answered alone, in its result (400/422), so the request "
        "itself accepts any objects here.",
    )


class JobLinks(BaseModel):
    self: str
    events: str


class ProgressView(BaseModel):
    fraction: float = Field(ge=0, le=1)
    message: str | None
    at: datetime


def progress_view(progress: dict[str, Any] | Any | None) -> ProgressView | None:
    """A job's stored progress (``jobs.progress``) as the views show it; None: none reported."""
    return ProgressView.model_validate(progress) if progress else None


class StepView(BaseModel):
    """One recorded step (docs/durable-execution.md): a step, a sleep, a signal's wait or a
    child, by name, with the attempt that recorded it."""

    name: str
    kind: StepKind
    status: StepStatus = Field(
        description="done: its value is final; waiting: a signal or child not arrived yet; "
        "timed_out: a signal's wait ran out"
    )
    at: datetime
    attempt: int
    wake_at: datetime | None = Field(None, description="A sleep's end, or a signal wait's deadline")
    child_id: uuid.UUID | None = Field(None, description="The child job, for a child step")


class StepWithValue(StepView):
    """A recorded step read with ``?steps=values``: with its value (a step's return value, a
    signal's value, a child's result; null for a sleep)."""

    value: Any


def step_views(
    steps: tuple[StepRecord, ...] | None, *, values: bool
) -> list[StepWithValue | StepView] | None:
    """A job's steps as the single job's view shows them (None where they were not read)."""
    if steps is None:
        return None
    model = StepWithValue if values else StepView
    return [model.model_validate(step.as_json(with_value=values)) for step in steps]


WaitingFor = dict[Literal["signal", "child"], str]


class JobView(BaseModel):
    id: uuid.UUID
    type: str
    state: JobState
    idempotency_key: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    replayed_attempts: int = Field(
        0,
        description="Attempts used before its latest replay (0: never replayed); its run's "
        "attempt is attempts - replayed_attempts of max_attempts - replayed_attempts",
    )
    created_at: datetime
    updated_at: datetime
    available_at: datetime
    run_at: datetime | None = Field(description="The due time the submission asked for")
    cancel_requested_at: datetime | None = Field(
        description="A cancel asked while it ran: its consumer is stopping the handler"
    )
    finished_at: datetime | None
    lease_until: datetime | None
    last_error_code: str | None
    last_error: str | None
    result: dict[str, Any] | None
    priority: int = Field(0, description="Higher runs first")
    concurrency_key: str | None = Field(
        None, description="What a per-key limit of its type counts it under"
    )
    unique_key: str | None = Field(
        None, description="No other live job of yours of its type has this unique key"
    )
    workflow_id: uuid.UUID | None = Field(
        None, description="The workflow it is a job of (docs/workflows.md); null outside one"
    )
    progress: ProgressView | None = Field(
        None, description="What its handler last reported (context.progress)"
    )
    no_consumer: bool | None = Field(
        None,
        description="Waiting, and no running consumer runs its type: it runs once one starts "
        "(docs/job-types.md); null where not read (lists)",
    )
    wake_at: datetime | None = Field(
        None,
        description="Sleeping (docs/durable-execution.md): when it is due again; null while it "
        "waits for a signal or a child without a deadline, and in every other state",
    )
    waiting_for: WaitingFor | None = Field(
        None,
        description='Sleeping: {"signal": name} or {"child": id}; null: its time only, or '
        "not sleeping",
        json_schema_extra={"maxProperties": 1, "minProperties": 1},
    )
    parent_job_id: uuid.UUID | None = Field(
        None, description="The job that started it as a child (context.run_child, start_child)"
    )
    sequence_key: str | None = Field(
        None, description="Its sequence: it runs after your jobs of this key accepted before it"
    )
    blocked_by: uuid.UUID | None = Field(
        None,
        description="Queued in a sequence behind a quarantined job: that job, which blocks it "
        "until it is replayed and succeeds or is cancelled; null otherwise, and in lists",
    )
    steps: list[StepWithValue | StepView] | None = Field(
        None,
        description="What its handler recorded, in order (the single job's view; null in "
        "lists); each step's value with ?steps=values",
    )
    links: JobLinks

    @classmethod
    def of(cls, job: Job, *, step_values: bool = False) -> JobView:
        location = job_location(job.id)
        return cls(
            id=job.id,
            type=job.type,
            state=job.state,
            idempotency_key=job.idempotency_key,
            payload=job.payload if isinstance(job.payload, dict) else {},
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            replayed_attempts=job.replayed_attempts,
            created_at=job.created_at,
            updated_at=job.updated_at,
            available_at=job.available_at,
            run_at=job.run_at,
            cancel_requested_at=job.cancel_requested_at,
            finished_at=job.finished_at,
            lease_until=job.lease_until,
            last_error_code=job.last_error_code,
            last_error=job.last_error,
            result=job.result if job.state == JobState.SUCCEEDED else None,
            priority=job.priority,
            concurrency_key=job.concurrency_key,
            unique_key=job.unique_key,
            workflow_id=job.workflow_id,
            progress=progress_view(job.progress),
            no_consumer=job.no_consumer,
            wake_at=job.wake_at,
            waiting_for=job.waiting_for,
            parent_job_id=job.parent_job_id,
            sequence_key=job.sequence_key,
            blocked_by=job.blocked_by,
            steps=step_views(job.steps, values=step_values),
            links=JobLinks(self=location, events=f"{location}/events"),
        )


# The 202 of a cancel, the owner's (POST /v1/jobs/{id}/cancel) and an operator's
# (POST /v1/admin/jobs/{id}/cancel): a running job's cancel is a request its consumer carries out.
CANCEL_REQUESTED: dict[str, Any] = {
    "model": JobView,
    "description": "The job is running: its cancel is requested (asked again, the same "
    "answer). Its consumer stops the handler and the job ends `cancelled`, unless the "
    "attempt finished first",
}


class DeduplicatedJobView(JobView):
    """The answer to a unique submission while a job of the same type and unique key is
    queued, running or retrying: that job, and no new one (docs/flow-control.md)."""

    # Required, so that a reader trying this schema first tells the two views apart.
    deduplicated: bool = Field(
        description="Always true: the view is of the job that holds the unique key"
    )


class DebouncedJobView(JobView):
    """The answer to a debounced submission (``debounce_seconds``): the key's queued job, which
    took this submission's payload and its new start, and no new one (docs/flow-control.md)."""

    debounced: bool = Field(
        description="Always true: the key's job now has this payload and starts later"
    )


def submitted_view(
    job: Job, *, deduplicated: bool, created: bool = False, debounced: bool = False
) -> JobView:
    """A submission's answer: the job, marked when it is a job of the unique key that answered
    it (deduplicated) or took its payload (debounced). A job made now has recorded no step
    (``steps: []``, as its read answers, with no read); another one's steps were not read
    (null)."""
    view = JobView.of(job)
    if created:
        view.steps = []
    if debounced:
        return DebouncedJobView(**dict(view), debounced=True)
    return DeduplicatedJobView(**dict(view), deduplicated=True) if deduplicated else view


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next page")


class EventView(BaseModel):
    at: datetime
    event: str
    attempt: int
    detail: str | None


class EventList(BaseModel):
    job_id: uuid.UUID
    events: list[EventView]


class FieldError(BaseModel):
    """One invalid field of a request: where (``["body", "max_attempts"]``) and what."""

    loc: list[str]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    code: str
    detail: str | None = None
    errors: list[FieldError] | None = Field(
        None, description="Where and what, for a request that failed validation"
    )
    job_id: str | None = Field(
        None,
        description="The job that holds the key: of an idempotency_conflict (its "
        "Idempotency-Key's) or a duplicate_job (its unique key's)",
    )


class BatchResult(BaseModel):
    """One item's answer: its status as a single submission would have had it, and the job
    (202 new, 200 the key's existing job) or the problem."""

    status: int
    # The deduplicated and debounced views first: generated clients try the schemas in order,
    # and only they require ``deduplicated`` / ``debounced``.
    job: DeduplicatedJobView | DebouncedJobView | JobView | None = None
    error: Problem | None = None


class BatchAnswer(BaseModel):
    results: list[BatchResult] = Field(description="One per submitted job, in order")


# --- operators' answers -------------------------------------------------------------------
# Open models (extra fields allowed and passed through): a report may gain fields without
# breaking clients that read the ones below.


class OpenModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class TraceIntent(OpenModel):
    recorded: bool
    recorded_at: str | None = Field(description="ISO 8601")
    client: str
    idempotency_key: str


class TraceOutboxRow(OpenModel):
    id: int
    created_at: str | None
    due_at: str | None
    published_at: str | None = Field(description="null until the broker confirmed it")
    publish_attempts: int
    last_error: str | None


class TraceDeliveries(OpenModel):
    total: int
    claimed: int
    duplicate: int


class TraceResult(OpenModel):
    stored_at: str | None
    attempt: int
    value: dict[str, Any]


class TraceEvent(OpenModel):
    at: str | None
    event: str
    attempt: int
    detail: str | None
    error: dict[str, Any] | None = Field(None, description="a failed attempt's error")


class TraceStep(OpenModel):
    name: str
    kind: StepKind
    status: StepStatus
    at: str
    attempt: int
    wake_at: str | None = None
    child_id: uuid.UUID | None = None


class TraceSignal(OpenModel):
    name: str
    sent_at: str
    taken_by: str | None = Field(description="the step name of the wait that took it")
    taken_at: str | None


class TraceView(OpenModel):
    """What happened to one job: intent, publishing, deliveries, attempts, result, and why it
    stopped (``jobrelay jobs trace``)."""

    job_id: uuid.UUID
    type: str
    intent: TraceIntent
    outbox: list[TraceOutboxRow]
    published: int = Field(description="published events (one per confirmed outbox row)")
    deliveries: TraceDeliveries
    attempts: int
    max_attempts: int
    replayed_attempts: int = Field(
        0, description="attempts used before its latest replay; the journal numbers the life's"
    )
    retries_scheduled: int
    lease_expiries: int
    stale_completions_rejected: int
    replays: int
    result: TraceResult | None
    state: JobState
    workflow_id: uuid.UUID | None = None
    progress: ProgressView | None = None
    why: str
    last_failure: dict[str, Any] | None = None
    events: list[TraceEvent]
    wake_at: str | None = Field(None, description="sleeping: when it is due again")
    waiting_for: dict[str, str] | None = Field(
        None, description='sleeping: {"signal": name} or {"child": id}'
    )
    steps: list[TraceStep] = Field(default_factory=list, description="its recorded steps")
    signals: list[TraceSignal] = Field(
        default_factory=list, description="the signals sent to it, oldest first"
    )


class OutboxStats(OpenModel):
    unpublished: int
    due: int
    oldest_due_age_seconds: float | None


class RetryingStats(OpenModel):
    count: int
    next_due_at: str | None


class BrokerBlockView(OpenModel):
    dispatcher: str
    reason: str
    since: str


class PausedQueueView(OpenModel):
    name: str
    since: str
    by: str | None = Field(description="the admin client (or jobrelay queues pause) that paused it")


class StatsView(OpenModel):
    """``jobrelay stats``: jobs by state, outbox backlog, expired leases, failures by code."""

    jobs_by_state: dict[str, int]
    outbox: OutboxStats
    expired_leases: int = Field(description="running jobs whose lease has expired")
    retrying: RetryingStats
    quarantined_by_code: dict[str, int]
    failed_by_code: dict[str, int]
    published_never_claimed: int
    published_never_claimed_after_seconds: float
    redispatched_last_hour: int = Field(
        description="jobs whose message was provably lost and published again in the last hour"
    )
    broker_blocks: list[BrokerBlockView] = Field(
        default_factory=list,
        description="dispatchers the broker blocks from publishing now (a memory or disk "
        "alarm); accepted jobs wait in the outbox until it clears",
    )
    paused_queues: list[PausedQueueView] = Field(
        default_factory=list,
        description="work queues paused by an operator: their jobs are accepted and wait in the "
        "outbox (GET /v1/admin/queues has their backlog)",
    )
    no_consumer: dict[str, int] = Field(
        default_factory=dict,
        description="waiting jobs of the types no running consumer runs, by type: they run once "
        "a consumer for their type starts",
    )


class QuarantineQuery(BaseModel):
    """``GET /v1/admin/quarantine?code=&limit=``: which quarantined jobs to list."""

    code: str | None = Field(None, max_length=100, pattern=NO_NUL)
    limit: int = Field(100, ge=1, le=1000)


class QuarantinedMessageView(OpenModel):
    """A message in the quarantine queue, from its headers (``x-death``) and body."""

    message_id: str | None
    job_id: str | None
    type: str | None
    malformed: str | None = Field(description="why the body is not a job message, or null")
    reason: str | None = Field(description="the first death's reason: rejected, delivery_limit…")
    queue: str | None
    deaths: int
    died_at: str | None


class QuarantinedJobView(OpenModel):
    job_id: str
    type: str
    reason: str | None
    error: str | None
    attempts: int
    max_attempts: int
    quarantined_at: str | None
    messages: list[QuarantinedMessageView]


class QuarantineReport(OpenModel):
    """Both sides of the quarantine: the jobs' recorded reasons and the queue's messages."""

    jobs: list[QuarantinedJobView]
    other_messages: list[QuarantinedMessageView] = Field(
        description="messages in the quarantine queue of no listed job"
    )
    messages_in_queue: int
    broker: str = Field(
        "ok",
        description="ok; or unavailable / busy: the broker's side could not be read, and the "
        "jobs come from the database alone (their messages are unknown)",
    )


class ReconcileView(BaseModel):
    """What one forced reconciliation of the quarantine found and did."""

    messages_seen: int
    reconciled_delivery_limit: int = Field(
        description="jobs marked quarantined because the broker dead-lettered their message"
    )
    removed_surplus: int = Field(description="second copies of a quarantined job's message")
    removed_stale: int = Field(description="messages of jobs no longer quarantined")
    restored_missing: int = Field(
        description="quarantined jobs that had no message, given theirs again from the database"
    )
    messages_in_queue: int


class SignalView(BaseModel):
    """A signal kept (``sent``), or the same key's signal kept before (``repeated``)."""

    job_id: uuid.UUID
    name: str
    status: Literal["sent", "repeated"] = Field(
        description="sent: kept now (the job woke if it slept waiting for it); repeated: "
        "its Idempotency-Key was used for this job before, nothing new kept"
    )


class ReplayView(BaseModel):
    job_id: uuid.UUID
    status: str = Field(description="replayed")
    state: JobState | None


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


# --- flow control: queues and runtime limits (docs/flow-control.md) ---------------------------


class QueueView(BaseModel):
    """A work queue (``jobrelay.jobs.<name>``): its pause, the database's figures and the
    broker's (null while the broker is unreachable)."""

    name: str = Field(examples=["default"])
    paused: bool
    paused_at: datetime | None
    paused_by: str | None = Field(description="the admin client that paused it")
    backlog: int = Field(description="due jobs not yet published: they wait in the outbox")
    window_in_use: int | None = Field(
        description="published messages no consumer took yet (the broker's ready count); "
        "null while the broker is unreachable"
    )
    running: int
    consumers: int | None = Field(description="null while the broker is unreachable")


class QueueList(BaseModel):
    queues: list[QueueView]
    broker: str = Field(
        description="ok; or unavailable: window_in_use and consumers are null, the rest is "
        "read from the database"
    )


class LimitView(BaseModel):
    """The limit in force for a type: the code's (its registration) or a runtime override."""

    type: str
    concurrency: int | None = Field(description="at most this many run at once; null: none")
    rate: str | None = Field(
        description="at most this many start per second or minute; null: none",
        examples=["10/s"],
    )
    per_key: bool = Field(description="counted per concurrency key, else over the whole type")
    source: Literal["code", "runtime"]
    throttle: str | None = Field(
        None,
        description="at most this many submissions accepted per second, minute or hour (one "
        "more is refused 429 throttled): the runtime one, else the code's; null: none",
        examples=["5/m"],
    )


class LimitList(BaseModel):
    limits: list[LimitView] = Field(description="every type with a limit in force, by name")


class SequencesQuery(BaseModel):
    """``GET /v1/admin/sequences?blocked=&limit=``: which sequences to list."""

    blocked: bool = Field(False, description="true: only the sequences a quarantined job blocks")
    limit: int = Field(100, ge=1, le=1000)


class SequenceView(BaseModel):
    """A sequence with jobs waiting in line (docs/flow-control.md)."""

    client: str = Field(description="the name of the client that submitted its jobs")
    key: str = Field(description="its sequence_key")
    blocked_by: uuid.UUID | None = Field(
        description="its quarantined head, which holds the key until it is replayed and "
        "succeeds, or is cancelled; null: the head runs, or waits its turn, normally"
    )
    waiting: int = Field(description="how many jobs wait behind the head")


class SequenceList(BaseModel):
    sequences: list[SequenceView] = Field(
        description="blocked first, then the longest lines, at most limit"
    )


class SetLimit(BaseModel):
    """``PUT /v1/admin/limits/{type}``: the runtime limit, in force until it is cleared
    (``DELETE``); neither a concurrency nor a rate lifts the code's limit, unless a throttle is
    given alone: the concurrency and rate in force then stay."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int | None = Field(None, ge=1, le=CONCURRENCY_MAX, strict=True)
    rate: str | None = Field(
        None,
        max_length=50,
        description="N/s or N/m, N a whole number of at least 1",
        examples=["10/s"],
    )
    per_key: bool = Field(False, strict=True)
    throttle: str | None = Field(
        None,
        max_length=50,
        description="N/s, N/m or N/h: at most N submissions accepted per period, the excess "
        "refused 429 throttled; null: the code's throttle, if any",
        examples=["5/m"],
    )

    @field_validator("concurrency", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        """3.0 is 3, as for max_attempts; 3.5 and true stay refused."""
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("rate")
    @classmethod
    def _parses(cls, rate: str | None) -> str | None:
        check_rate(rate)
        return rate

    @field_validator("throttle")
    @classmethod
    def _throttle_parses(cls, throttle: str | None) -> str | None:
        check_throttle(throttle)
        return throttle

    def as_throttle(self) -> Throttle | None:
        return check_throttle(self.throttle)

    @model_validator(mode="after")
    def _whole_limit(self) -> SetLimit:
        self.as_limit()  # per_key needs a concurrency or a rate
        return self

    def as_limit(self) -> Limit:
        return runtime_limit(self.concurrency, self.rate, self.per_key)


def job_location(job_id: uuid.UUID) -> str:
    return f"/v1/jobs/{job_id}"


# --- workflows (docs/workflows.md) -----------------------------------------------------------


class WorkflowJobIn(BaseModel):
    """One job of ``POST /v1/workflows``: a submission's type, payload and options, its ref,
    and the refs it waits for."""

    model_config = ConfigDict(extra="forbid")

    ref: str = Field(min_length=1, max_length=1000, description="1–100 of [A-Za-z0-9_.-]")
    type: str = Field(min_length=1, max_length=TYPE_NAME_MAX)
    payload: dict[str, Any] = Field(default_factory=dict)
    after: list[str] = Field(default_factory=list, description="Refs of jobs of this workflow")
    max_attempts: int | None = Field(None, ge=1, le=MAX_ATTEMPTS_MAX, strict=True)
    priority: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX, strict=True)

    @field_validator("max_attempts", "priority", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        return SubmitJob._integral(value)  # as a single submission's

    @field_validator("payload")
    @classmethod
    def _storable(cls, payload: dict[str, Any]) -> dict[str, Any]:
        return SubmitJob._storable(payload)


class SubmitWorkflow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The size is checked with the graph (422 invalid_workflow naming it), not here.
    jobs: list[WorkflowJobIn] = Field(description="1 to 1,000 jobs")
    on_failure: OnFailure = OnFailure.CANCEL_DEPENDENTS


class WorkflowJobView(BaseModel):
    id: uuid.UUID
    type: str
    state: JobState
    after: list[str]
    last_error_code: str | None
    progress: ProgressView | None
    links: dict[str, str]


class WorkflowViewOut(BaseModel):
    id: uuid.UUID
    state: WorkflowState
    on_failure: OnFailure
    created_at: datetime
    cancelled_at: datetime | None
    jobs: dict[str, WorkflowJobView] = Field(description="By ref, in the order submitted")
    counts: dict[str, int] = Field(description="Jobs by state")
    links: dict[str, str]

    @classmethod
    def of(cls, view: WorkflowView) -> WorkflowViewOut:
        location = workflow_location(view.id)
        return cls(
            id=view.id,
            state=view.state,
            on_failure=view.on_failure,
            created_at=view.created_at,
            cancelled_at=view.cancelled_at,
            jobs={
                job.ref: WorkflowJobView(
                    id=job.id,
                    type=job.type,
                    state=job.state,
                    after=list(job.after),
                    last_error_code=job.last_error_code,
                    progress=progress_view(job.progress),
                    links={"self": job_location(job.id)},
                )
                for job in view.jobs
            },
            counts=view.counts,
            links={"self": location, "cancel": f"{location}/cancel"},
        )


def workflow_location(workflow_id: uuid.UUID) -> str:
    return f"/v1/workflows/{workflow_id}"


class JobTypeView(BaseModel):
    """A job type the API accepts (``GET /v1/admin/types``; docs/job-types.md)."""

    name: str
    source: Literal["loaded", "registered"] = Field(
        description="what the API validates it with: the handlers it loads (they win), or the "
        "payload schema a consumer registered"
    )
    description: str
    max_attempts: int | None = Field(description="null: the deployment's JOBRELAY_MAX_ATTEMPTS")
    priority: int = Field(description="its submissions' priority when they name none")
    timeout_seconds: float
    # The code's limit, as GET /v1/admin/limits names its parts; what holds is the dispatchers'
    # (their registry's, or a runtime override).
    concurrency: int | None = Field(description="the code's: at most this many at once; null: none")
    rate: str | None = Field(description="the code's: starts per second or minute; null: none")
    per_key: bool = Field(description="the code's limit counts per concurrency key")
    payload_schema: dict[str, Any] = Field(description="the payload's JSON Schema")
    registered_by: str | None = Field(
        description="the consumer (host:pid) that registered it last; null: none has"
    )
    registered_at: datetime | None
    api: bool = Field(
        description="false: closed to HTTP by default (a Django task, or declared api=False): "
        "only a client whose type patterns name it submits it over HTTP"
    )


class ClientView(BaseModel):
    """An API client as ``GET /v1/admin/clients`` and ``jobrelay clients list`` show it (never
    its token or its hash)."""

    id: uuid.UUID
    name: str
    admin: bool
    disabled: bool
    created_at: datetime
    disabled_at: datetime | None
    previous_token_expires_at: datetime | None = Field(
        description="while a rotation's grace period runs: when the previous token stops working"
    )
    rate_limit_per_second: float | None = Field(description="null: the API's settings apply")
    rate_limit_burst: int | None
    type_patterns: list[str] | None = Field(
        description="shell-style globs (* and ?) of the job types it may submit; null: the "
        "default rule: every type but Django tasks and api=False types (an admin client: every "
        "type)"
    )

    @classmethod
    def of(cls, client: ClientListing) -> ClientView:
        return cls(
            id=client.id,
            name=client.name,
            admin=client.is_admin,
            disabled=client.disabled_at is not None,
            created_at=client.created_at,
            disabled_at=client.disabled_at,
            previous_token_expires_at=client.previous_token_expires_at,
            rate_limit_per_second=client.rate_limit_per_second,
            rate_limit_burst=client.rate_limit_burst,
            type_patterns=client.type_patterns,
        )


class ClientList(BaseModel):
    clients: list[ClientView] = Field(description="every client, oldest first")


class JobTypeList(BaseModel):
    types: list[JobTypeView] = Field(description="every type the API accepts, by name")
