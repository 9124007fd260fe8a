"""Frozen copies of the lists the migrations write into CHECK constraints, as each revision
left them. Later edits to the code's lists (``core/states.py``) must come with a new revision
and a new entry here; an entry is never changed."""

from __future__ import annotations

from collections.abc import Sequence

STATES_0001 = ("queued", "running", "retrying", "succeeded", "quarantined", "cancelled")
TERMINAL_STATES_0001 = ("succeeded", "quarantined", "cancelled")
EVENTS_0001 = (
    "received",
    "published",
    "claimed",
    "duplicate_delivery",
    "lease_renewed",
    "lease_expired",
    "stale_completion_rejected",
    "retry_scheduled",
    "succeeded",
    "quarantined",
    "replayed",
    "cancelled",
)
EVENTS_0002 = (*EVENTS_0001, "deferred", "redispatched")
LIVE_STATES_0003 = ("queued", "running", "retrying")


def in_list(column: str, values: Sequence[str]) -> str:
    """``column IN ('a', 'b')``: the text of a CHECK constraint."""
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


EVENTS_0005 = (*EVENTS_0002, "cancel_requested")
EVENTS_0007 = (*EVENTS_0005, "held")
STATES_0009 = (*STATES_0001, "waiting")
LIVE_STATES_0009 = (*LIVE_STATES_0003, "waiting")
EVENTS_0009 = (*EVENTS_0007, "parents_succeeded", "restored")
ON_FAILURE_0009 = ("cancel_dependents", "continue")

# The submission bounds revision 0010 wrote into jobrelay_enqueue's body, as core/bounds.py had
# them then (tests/migration/test_sql_enqueue_migration.py compares them with the live ones: a
# change there needs a new revision that replaces the function).
IDEMPOTENCY_KEY_MAX_0010 = 200
TYPE_NAME_MAX_0010 = 200
PRIORITY_RANGE_0010 = (-100, 100)
DEFAULT_MAX_ATTEMPTS_0010 = 3
# The longest integer (in digits) Python's json reads, sys.int_info.default_max_str_digits:
# jobrelay_enqueue refuses a payload with a longer one, which no consumer could read.
PYTHON_INT_DIGITS_MAX_0010 = 4300

# Every object jobrelay had created by revision 0011, as it named them: what `jobrelay migrate`
# moves out of ``public`` into jobrelay's schema on a database installed before 0012
# (db/migrations.py), and the functions revision 0012 pins to the schema. Indexes, sequences,
# constraints and triggers go with their tables. An entry is never changed.
TABLES_0011 = (
    "clients",
    "jobs",
    "workflows",
    "job_dependencies",
    "outbox",
    "job_results",
    "job_events",
    "job_totals",
    "job_count_deltas",
    "rate_limits",
    "broker_blocks",
    "console_keys",
    "queues",
    "type_limits",
    "type_rate_buckets",
    "job_types",
)
# The trigger functions (0001, 0003, 0005), then 0010's SQL enqueue and its helpers (0011
# replaced jobrelay_type_defaults).
TRIGGER_FUNCTIONS_0011 = (
    "jobrelay_notify_outbox",
    "jobrelay_count_finished",
    "jobrelay_notify_finished",
)
FUNCTIONS_0011 = (
    *TRIGGER_FUNCTIONS_0011,
    "jobrelay_reads_back",
    "jobrelay_float_digits",
    "jobrelay_json_number",
    "jobrelay_canonical_json",
    "jobrelay_request_hash",
    "jobrelay_enqueue_check",
    "jobrelay_type_defaults",
    "jobrelay_enqueue",
)
# The revisions a ``public.alembic_version`` of jobrelay's own can hold (any other is an
# application's, left alone).
REVISIONS_0011 = tuple(f"{number:04d}" for number in range(1, 12))

# Revision 0016 (durable execution, docs/durable-execution.md): the state ``sleeping``, live, and
# the journal's ``sleeping``, ``signalled`` and ``woke``.
STATES_0016 = (*STATES_0009, "sleeping")
LIVE_STATES_0016 = (*LIVE_STATES_0009, "sleeping")
EVENTS_0016 = (*EVENTS_0009, "sleeping", "signalled", "woke")
STEP_KINDS_0016 = ("step", "sleep", "signal", "child")
STEP_STATUSES_0016 = ("done", "waiting", "timed_out")
# The function a sender calls in its own transaction to send a signal (db/sql/signals.sql too).
FUNCTIONS_0016 = ("jobrelay_signal",)
# The views (0018): the journal as it reads.
VIEWS_0018 = ("job_journal",)
# Revision 0019 (order and submission policies, docs/flow-control.md): the journal's
# ``released``: a job of a sequence let go when the one ahead of it ended.
EVENTS_0019 = (*EVENTS_0016, "released")
# Revision 0020: the longest sequence key jobrelay_enqueue takes, as core/bounds.py's
# FLOW_KEY_MAX had it then.
FLOW_KEY_MAX_0020 = 200
