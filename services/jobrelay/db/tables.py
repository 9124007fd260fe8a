"""The schema as SQLAlchemy metadata.

Alembic migrations create the tables; this metadata is what the migration test compares the
migrated database against, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from jobrelay.core.bounds import FLOW_KEY_MAX, PRIORITY_MAX, PRIORITY_MIN
from jobrelay.core.durable import StepKind, StepStatus
from jobrelay.core.settings import DEFAULT_SCHEMA
from jobrelay.core.states import TERMINAL_STATES, JobEvent, JobState
from jobrelay.core.workflows import OnFailure

# Every table lives in jobrelay's own schema (docs/configuration.md, JOBRELAY_DATABASE_SCHEMA):
# the default name here, another one put in its place where statements run (db/schema.py).
metadata = MetaData(
    schema=DEFAULT_SCHEMA,
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)


def _in_list(column: str, values: list[str]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"


JOB_STATES = [state.value for state in JobState]
JOB_EVENTS = [event.value for event in JobEvent]
TERMINAL = [state.value for state in JobState if state in TERMINAL_STATES]
LIVE = [state.value for state in JobState if state not in TERMINAL_STATES]
ON_FAILURE = [policy.value for policy in OnFailure]
STEP_KINDS = [kind.value for kind in StepKind]
STEP_STATUSES = [status.value for status in StepStatus]


def _job_reference(*, primary_key: bool = False) -> Column[Any]:
    """``job_id``: the job a row belongs to, deleted with it."""
    owner = ForeignKey("jobs.id", ondelete="CASCADE")
    return Column("job_id", UUID(as_uuid=True), owner, primary_key=primary_key, nullable=False)


def _moment(name: str) -> Column[Any]:
    """A point in time, with its time zone; empty until it happens."""
    return Column(name, DateTime(timezone=True))


def _set_at_insert(name: str) -> Column[Any]:
    """A point in time, by default the time of the transaction that inserts the row."""
    return Column(name, DateTime(timezone=True), nullable=False, server_default=func.now())


clients = Table(
    "clients",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("token_hash", Text, nullable=False, unique=True),
    Column("is_admin", Boolean, nullable=False, server_default=text("false")),
    _moment("disabled_at"),
    _set_at_insert("created_at"),
    # A rotated token keeps working until its grace period ends.
    Column("previous_token_hash", Text),
    _moment("previous_token_expires_at"),
    CheckConstraint("char_length(name) BETWEEN 1 AND 100", name="name_length"),
    CheckConstraint(
        "(previous_token_hash IS NULL) = (previous_token_expires_at IS NULL)",
        name="previous_token_whole",
    ),
    # The client's own submission limit (docs/overload.md); empty: the API's settings apply.
    Column("rate_limit_per_second", Float),
    Column("rate_limit_burst", Integer),
    CheckConstraint(
        "rate_limit_per_second > 0 AND rate_limit_burst >= 1", name="rate_limit_positive"
    ),
    CheckConstraint(
        "(rate_limit_per_second IS NULL) = (rate_limit_burst IS NULL)", name="rate_limit_whole"
    ),
    # The types it may submit, shell-style globs (migration 0013; docs/submitting.md); NULL:
    # the default rule (core/clients.py, may_submit).
    Column("type_patterns", ARRAY(Text)),
    CheckConstraint("cardinality(type_patterns) >= 1", name="type_patterns_not_empty"),
    Index(
        "ix_clients_previous_token_hash",
        "previous_token_hash",
        unique=True,
        postgresql_where=text("previous_token_hash IS NOT NULL"),
    ),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("client_id", UUID(as_uuid=True), ForeignKey("clients.id"), nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("request_hash", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'queued'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    _set_at_insert("available_at"),
    Column("lease_token", UUID(as_uuid=True)),
    _moment("lease_until"),
    Column("last_error_code", Text),
    Column("last_error", Text),
    _set_at_insert("created_at"),
    _set_at_insert("updated_at"),
    _moment("finished_at"),
    # When a consumer first met this job's type without knowing it (cleared by a claim).
    _moment("type_unknown_since"),
    # The due time the submission asked for (run_at, delay_seconds); empty: due at once.
    _moment("run_at"),
    # A cancel asked of this job while it ran; its consumer's heartbeat carries it.
    _moment("cancel_requested_at"),
    # The W3C trace context its messages carry (migration 0006; docs/observability.md).
    Column("traceparent", Text),
    # Flow control (migration 0007; docs/flow-control.md): higher priority runs first; the
    # concurrency key names the slot a limit counts; the unique key allows one live job.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("concurrency_key", Text),
    Column("unique_key", Text),
    # Workflows (migration 0009; docs/workflows.md): the workflow and the job's ref in it; how
    # many of its parents have not succeeded yet (waiting while above 0); what its handler last
    # reported of its progress ({"fraction", "message", "at"}).
    Column("workflow_id", UUID(as_uuid=True), ForeignKey("workflows.id")),
    Column("workflow_ref", Text),
    Column("waiting_for", Integer, nullable=False, server_default=text("0")),
    Column("progress", JSONB),
    # The attempts used before its latest replay (migration 0015; docs/states.md): the run's
    # attempt is ``attempts - replayed_attempts``, its budget ``max_attempts - replayed_attempts``.
    Column("replayed_attempts", Integer, nullable=False, server_default=text("0")),
    # Durable execution (migration 0016; docs/durable-execution.md): when a sleeper is due again
    # (NULL while it waits with no deadline), what it waits for ({"signal": name} or
    # {"child": id}; NULL for a plain sleep), and the job that started it as its child.
    _moment("wake_at"),
    Column("waiting_on", JSONB),
    Column("parent_job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="SET NULL")),
    # The lean journal (migration 0018; docs/life-of-a-job.md, "The journal"): the current
    # attempt's claim (its place in the journal, when, by whom) and a success's place, which
    # the view ``job_journal`` tells as entries instead of ``job_events`` rows.
    Column("claimed_seq", BigInteger),
    _moment("claimed_at"),
    Column("claimed_by", Text),
    Column("finished_seq", BigInteger),
    # Order and submission policies (migration 0019; docs/flow-control.md): its sequence, its
    # place in it (the order of acceptance, from ``job_sequence_order``), and whether it is
    # queued behind the one ahead of it, with no outbox row yet.
    Column("sequence_key", Text),
    Column("sequence_no", BigInteger),
    Column("sequence_waits", Boolean, nullable=False, server_default=text("false")),
    CheckConstraint("char_length(sequence_key) <= 200", name="sequence_key_length"),
    CheckConstraint(
        "(sequence_key IS NULL) = (sequence_no IS NULL) AND (sequence_key IS NOT NULL "
        "OR NOT sequence_waits)",
        name="sequence_whole",
    ),
    # A sequence's jobs that have not succeeded or been cancelled, in order: the one it runs,
    # the ones queued behind it, a quarantined one that blocks it.
    Index(
        "ix_jobs_sequence_unfinished",
        "client_id",
        "sequence_key",
        "sequence_no",
        postgresql_where=text(
            "sequence_key IS NOT NULL AND state NOT IN ('succeeded', 'cancelled')"
        ),
    ),
    # The ended jobs of a unique key: a deduplication window looks for the latest.
    Index(
        "ix_jobs_unique_ended",
        "client_id",
        "type",
        "unique_key",
        "finished_at",
        postgresql_where=text("unique_key IS NOT NULL AND finished_at IS NOT NULL"),
    ),
    CheckConstraint(
        "(state = 'sleeping') = (wake_at IS NOT NULL OR waiting_on IS NOT NULL)",
        name="sleeping_has_a_wake",
    ),
    # A finished child's parent, found when the child ends.
    Index(
        "ix_jobs_parent_job_id", "parent_job_id", postgresql_where=text("parent_job_id IS NOT NULL")
    ),
    UniqueConstraint("client_id", "idempotency_key"),
    CheckConstraint(_in_list("state", JOB_STATES), name="state_known"),
    CheckConstraint(
        "(state = 'running') = (lease_token IS NOT NULL AND lease_until IS NOT NULL)",
        name="lease_iff_running",
    ),
    CheckConstraint("(lease_token IS NULL) = (lease_until IS NULL)", name="lease_whole"),
    CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="attempts_in_bounds"),
    CheckConstraint("max_attempts >= 1", name="max_attempts_positive"),
    CheckConstraint(
        "replayed_attempts >= 0 AND replayed_attempts <= attempts",
        name="replayed_attempts_in_bounds",
    ),
    CheckConstraint(
        "char_length(idempotency_key) BETWEEN 1 AND 200", name="idempotency_key_length"
    ),
    CheckConstraint(
        f"({_in_list('state', TERMINAL)}) = (finished_at IS NOT NULL)",
        name="finished_iff_terminal",
    ),
    # Keyset pagination of a client's own jobs, newest first.
    Index("ix_jobs_client_id_created_at_id", "client_id", "created_at", "id"),
    # Live jobs by state and due time: stats count them and sweeps find stranded ones without
    # reading finished jobs, which leave this index.
    Index(
        "ix_jobs_live_state_available_at",
        "state",
        "available_at",
        postgresql_where=text(_in_list("state", LIVE)),
    ),
    # Finished jobs by state, oldest first: retention's batches and the quarantine listing.
    Index(
        "ix_jobs_state_finished_at",
        "state",
        "finished_at",
        postgresql_where=text("finished_at IS NOT NULL"),
    ),
    # Rescue finds expired leases without scanning finished jobs.
    Index(
        "ix_jobs_lease_until_running",
        "lease_until",
        postgresql_where=text("state = 'running'"),
    ),
    CheckConstraint(f"priority BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX}", name="priority_range"),
    CheckConstraint(
        f"char_length(concurrency_key) <= {FLOW_KEY_MAX}", name="concurrency_key_length"
    ),
    CheckConstraint(f"char_length(unique_key) <= {FLOW_KEY_MAX}", name="unique_key_length"),
    # At most one live job per client, type and unique key: the arbiter of unique submissions.
    Index(
        "ux_jobs_live_unique_key",
        "client_id",
        "type",
        "unique_key",
        unique=True,
        postgresql_where=text(f"unique_key IS NOT NULL AND {_in_list('state', LIVE)}"),
    ),
    # The running jobs by type and concurrency key: the slots a concurrency limit counts.
    Index(
        "ix_jobs_running_type_key",
        "type",
        "concurrency_key",
        postgresql_where=text("state = 'running'"),
    ),
    CheckConstraint("(state = 'waiting') = (waiting_for > 0)", name="waiting_iff_parents_pending"),
    CheckConstraint("(workflow_id IS NULL) = (workflow_ref IS NULL)", name="workflow_ref_whole"),
    # The jobs of a workflow (its view, its cancel).
    Index("ix_jobs_workflow_id", "workflow_id", postgresql_where=text("workflow_id IS NOT NULL")),
)

# A workflow (migration 0009): its jobs are the rows of ``jobs`` that name it; idempotent by
# (client, key) as a job is.
workflows = Table(
    "workflows",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("client_id", UUID(as_uuid=True), ForeignKey("clients.id"), nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("request_hash", Text, nullable=False),
    Column("on_failure", Text, nullable=False),
    _set_at_insert("created_at"),
    _moment("cancelled_at"),
    UniqueConstraint("client_id", "idempotency_key"),
    CheckConstraint(_in_list("on_failure", ON_FAILURE), name="on_failure_known"),
    CheckConstraint(
        "char_length(idempotency_key) BETWEEN 1 AND 200", name="idempotency_key_length"
    ),
    # The listings, newest first (migration 0015; `jobrelay workflows list`, the console).
    Index("ix_workflows_created_at_id", "created_at", "id"),
)

# What a job recorded (migration 0016; docs/durable-execution.md): a step's value, a sleep's
# wake time, a signal taken (or its wait's deadline), a child, by name, and the attempt that
# recorded it. They go with the job.
job_steps = Table(
    "job_steps",
    metadata,
    _job_reference(primary_key=True),
    Column("name", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'done'")),
    Column("attempt", Integer, nullable=False),
    _set_at_insert("at"),
    Column("value", JSONB),
    _moment("wake_at"),
    Column("child_id", UUID(as_uuid=True)),
    CheckConstraint(_in_list("kind", STEP_KINDS), name="kind_known"),
    CheckConstraint(_in_list("status", STEP_STATUSES), name="status_known"),
    CheckConstraint("char_length(name) BETWEEN 1 AND 200", name="name_length"),
)

# The signals sent to jobs (migration 0016): each taken by at most one wait, by its step's name.
job_signals = Table(
    "job_signals",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    _job_reference(),
    Column("name", Text, nullable=False),
    Column("value", JSONB, nullable=False),
    Column("idempotency_key", Text),
    _set_at_insert("sent_at"),
    Column("taken_by", Text),
    _moment("taken_at"),
    UniqueConstraint("job_id", "idempotency_key"),
    CheckConstraint("char_length(name) BETWEEN 1 AND 200", name="name_length"),
    CheckConstraint("(taken_by IS NULL) = (taken_at IS NULL)", name="taken_whole"),
    # The untaken signals of a job by name, oldest first: what a wait takes.
    Index(
        "ix_job_signals_untaken",
        "job_id",
        "name",
        "id",
        postgresql_where=text("taken_by IS NULL"),
    ),
)

# The edges of workflows: ``job_id`` waits for ``parent_id``; read both ways.
job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column(
        "job_id", UUID(as_uuid=True), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    ),
    Column(
        "parent_id",
        UUID(as_uuid=True),
        ForeignKey("jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    CheckConstraint("job_id <> parent_id", name="not_itself"),
    Index("ix_job_dependencies_parent_id", "parent_id"),
)


outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    _job_reference(),
    _set_at_insert("available_at"),
    _set_at_insert("created_at"),
    _moment("published_at"),
    Column("publish_attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
    # Copies of the job's (migration 0007), written by every insert into the outbox so the
    # relay orders and shares out its pick without reading jobs. Empty (priority 0) in rows
    # written before 0007. No foreign key on client_id: the job's carries it.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("client_id", UUID(as_uuid=True)),
    Column("type", Text),
    # The ``published`` entry of a confirmed row (migration 0018): its place in the journal and
    # its time, both drawn by the lease whose publish the broker confirmed, and the attempt its
    # message delivers. NULL until then, and in rows published before 0018 (their entry is a
    # ``job_events`` row).
    Column("journal_id", BigInteger),
    _moment("leased_at"),
    Column("delivers_attempt", Integer),
    CheckConstraint(f"priority BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX}", name="priority_range"),
    # The relay's hot path: due, unpublished rows, oldest first.
    Index(
        "ix_outbox_available_at_unpublished",
        "available_at",
        postgresql_where=text("published_at IS NULL"),
    ),
    # Retention deletes published rows by age.
    Index(
        "ix_outbox_published_at_published",
        "published_at",
        postgresql_where=text("published_at IS NOT NULL"),
    ),
    Index("ix_outbox_job_id", "job_id"),
    # The relay's flow pick (migration 0008; db/queries.py LEASE_FLOW_PICK): the clients with
    # due rows, each client's rows in priority then due order; and the rows without a type or
    # client (written before 0007), read with their job.
    Index(
        "ix_outbox_client_priority_due",
        "client_id",
        text("priority DESC"),
        "available_at",
        postgresql_where=text("published_at IS NULL"),
    ),
    Index(
        "ix_outbox_legacy_unpublished",
        "available_at",
        postgresql_where=text("published_at IS NULL AND (type IS NULL OR client_id IS NULL)"),
    ),
)

job_results = Table(
    "job_results",
    metadata,
    _job_reference(primary_key=True),
    Column("result", JSONB, nullable=False),
    Column("attempt", Integer, nullable=False),
    _set_at_insert("created_at"),
)

job_events = Table(
    "job_events",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    _job_reference(),
    _set_at_insert("at"),
    Column("event", Text, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    Column("detail", Text),
    # The failed attempt's exception: {"class", "message", "traceback"}, secrets masked.
    Column("error", JSONB),
    # The entry's place in the journal when it was drawn before the row was written (an entry
    # a job's row told first, migration 0018); NULL: its id is its place.
    Column("seq", BigInteger),
    CheckConstraint(_in_list("event", JOB_EVENTS), name="event_known"),
    Index("ix_job_events_job_id_id", "job_id", "id"),
    # The stats count the last hour's redispatches; nothing else reads the journal by time.
    Index("ix_job_events_redispatched_at", "at", postgresql_where=text("event = 'redispatched'")),
)

# How many finished jobs there are, by state and error code ('' for none): ``job_totals`` plus
# the deltas not folded into it yet. Statement triggers on ``jobs`` (migration 0017; row triggers
# from 0003 until then) append to ``job_count_deltas`` one row per (state, code) a statement
# changed, the net of the jobs entering and leaving finished states; the dispatcher folds them into
# the totals (``queries.FOLD_JOB_COUNTS``). The stats read these few rows, never the jobs.
job_totals = Table(
    "job_totals",
    metadata,
    Column("state", Text, primary_key=True),
    Column("code", Text, primary_key=True),
    Column("n", BigInteger, nullable=False),
)

job_count_deltas = Table(
    "job_count_deltas",
    metadata,
    Column("state", Text, nullable=False),
    Column("code", Text, nullable=False),
    Column("n", Integer, nullable=False),
)

# Each limited client's next allowed submission time (``queries.TAKE_RATE_TOKEN``). UNLOGGED:
# written per limited submission, worthless after a crash (emptied then: full bursts again).
rate_limits = Table(
    "rate_limits",
    metadata,
    Column("client_id", UUID(as_uuid=True), primary_key=True),
    Column("allowed_from", DateTime(timezone=True), nullable=False),
    prefixes=["UNLOGGED"],
)

# Dispatchers that RabbitMQ blocks from publishing (a resource alarm), while it lasts; a row
# not seen for a while is a dispatcher that stopped while blocked, and is not shown.
broker_blocks = Table(
    "broker_blocks",
    metadata,
    Column("dispatcher", Text, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
    prefixes=["UNLOGGED"],
)

# The console's signing key for session cookies and CSRF tokens: one row, made by migration 0006.
console_keys = Table(
    "console_keys",
    metadata,
    Column("id", SmallInteger, primary_key=True),
    Column("secret", LargeBinary, nullable=False),
    _set_at_insert("created_at"),
    CheckConstraint("id = 1", name="one_key"),
    CheckConstraint("octet_length(secret) >= 30", name="secret_long_enough"),
)

# The work queues by short name (``default``, ``slow``; migration 0007). Paused while
# ``paused_at`` is set: a row, so a pause survives restarts of every service.
queues = Table(
    "queues",
    metadata,
    Column("name", Text, primary_key=True),
    _moment("paused_at"),
    Column("paused_by", Text),
    _set_at_insert("created_at"),
)


def _throttle() -> tuple[Any, ...]:
    """A throttle's columns (migration 0019): at most ``throttle_count`` submissions accepted
    per ``throttle_period_seconds``; both NULL: none."""
    return (
        Column("throttle_count", Integer),
        Column("throttle_period_seconds", Integer),
        CheckConstraint("throttle_count >= 1", name="throttle_count_positive"),
        CheckConstraint("throttle_period_seconds IN (1, 60, 3600)", name="throttle_period_known"),
        CheckConstraint(
            "(throttle_count IS NULL) = (throttle_period_seconds IS NULL)", name="throttle_whole"
        ),
    )


# The submissions of a throttled type accepted within its throttle's period, per throttle key
# ('' for none; migration 0019): an accept counts them under the key's lock, and deletes the
# ones older than the period.
throttle_accepts = Table(
    "throttle_accepts",
    metadata,
    Column("type", Text, nullable=False),
    Column("key", Text, nullable=False),
    _set_at_insert("at"),
    Index("ix_throttle_accepts_type_key_at", "type", "key", "at"),
)

# The order of acceptance of sequenced jobs (``jobs.sequence_no``; migration 0019).
job_sequence_order = Sequence("job_sequence_order", metadata=metadata)


# Runtime overrides of a type's limit (``jobrelay limits set``): a row is the limit in force.
type_limits = Table(
    "type_limits",
    metadata,
    Column("type", Text, primary_key=True),
    Column("concurrency", Integer),
    Column("rate_count", Integer),
    Column("rate_period_seconds", Integer),
    Column("per_key", Boolean, nullable=False, server_default=text("false")),
    _set_at_insert("updated_at"),
    CheckConstraint("concurrency >= 1", name="concurrency_positive"),
    CheckConstraint("rate_count >= 1", name="rate_count_positive"),
    CheckConstraint("rate_period_seconds IN (1, 60)", name="rate_period_known"),
    CheckConstraint("(rate_count IS NULL) = (rate_period_seconds IS NULL)", name="rate_whole"),
    *_throttle(),
)

# Per type and key ('' when the limit is not per key), the time from which the next start fits
# the type's rate (GCRA, like ``rate_limits``). UNLOGGED: emptied by a crash, a full burst again.
type_rate_buckets = Table(
    "type_rate_buckets",
    metadata,
    Column("type", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("allowed_from", DateTime(timezone=True), nullable=False),
    prefixes=["UNLOGGED"],
)

# The job types the consumers registered at start (migration 0011; docs/job-types.md): what an
# API without their handlers validates submissions with. The last consumer to register a type
# wins; none deletes one (another consumer may still run it).
job_types = Table(
    "job_types",
    metadata,
    Column("name", Text, primary_key=True),
    Column("payload_schema", JSONB, nullable=False),  # the payload model's JSON Schema
    Column("max_attempts", Integer),  # NULL: the deployment's default
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("timeout_seconds", Float, nullable=False),
    # The code's limit, for operators (type_limits holds the runtime overrides).
    Column("concurrency", Integer),
    Column("rate_count", Integer),
    Column("rate_period_seconds", Integer),
    Column("per_key", Boolean, nullable=False, server_default=text("false")),
    Column("description", Text, nullable=False, server_default=text("''")),
    Column("registered_by", Text, nullable=False),
    _set_at_insert("registered_at"),
    # False: closed to HTTP by default (a Django task, a type declared api=False; migration
    # 0013): only a client whose type patterns name it submits it over HTTP.
    Column("api", Boolean, nullable=False, server_default=text("true")),
    # Until when a consumer that runs it is known to consume its queue (MARK_TYPES_SERVED).
    Column("served_until", DateTime(timezone=True)),
    # The code's throttle and the window of its unique key (migration 0019).
    *_throttle(),
    Column("unique_for_seconds", Float),
    CheckConstraint("max_attempts >= 1", name="max_attempts_positive"),
    CheckConstraint(
        "replayed_attempts >= 0 AND replayed_attempts <= attempts",
        name="replayed_attempts_in_bounds",
    ),
    CheckConstraint(f"priority BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX}", name="priority_range"),
    CheckConstraint("timeout_seconds > 0", name="timeout_positive"),
)
