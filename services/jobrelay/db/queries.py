"""Every SQL statement jobrelay runs, by name: the named statements of ``db/sql/*.sql`` (one
file per store), loaded once at import, each a typed constant here so that a call site reads
``q.CLAIM_JOBS`` and mypy catches a misspelt one. A name that no file has fails at import.

Rules the statements keep (so call sites never build SQL from strings):
- every state change is guarded on the state(s) it expects (docs/states.md), written out in
  the statement and declared by its ``-- makes:`` line, and on the lease token when a worker
  reports on a job (tests/unit/test_transitions.py checks each guard against
  ``core/states.py``);
- a transition and its journal entry (and outbox row, and result) are written by one statement,
  so they commit or fail together;
- times come from the database clock (``now()``), never from a process clock, so workers on
  different machines agree on what "expired" means.

``python -m jobrelay.db.sql NAME`` prints a statement exactly as it runs, for psql or EXPLAIN.
"""

from __future__ import annotations

from sqlalchemy import TextClause

from jobrelay.core.states import ALL_TRANSITIONS, Transition
from jobrelay.db.sql import STATEMENTS, clause

# db/sql/jobs.sql
PING: TextClause = clause("ping")
JOBS_BY_KEYS: TextClause = clause("jobs_by_keys")
JOB_BY_ID: TextClause = clause("job_by_id")
JOB_EVENTS: TextClause = clause("job_events")
LIST_JOBS: TextClause = clause("list_jobs")
CANCEL_JOB: TextClause = clause("cancel_job")
REQUEST_CANCEL: TextClause = clause("request_cancel")
OUTBOX_ROWS_OF_JOB: TextClause = clause("outbox_rows_of_job")
CLIENT_NAME_OF_JOB: TextClause = clause("client_name_of_job")
RESULT_OF_JOB: TextClause = clause("result_of_job")

# db/sql/signals.sql
SEND_SIGNAL: TextClause = clause("send_signal")
STEPS_OF_JOB: TextClause = clause("steps_of_job")
SIGNALS_OF_JOB: TextClause = clause("signals_of_job")
RESET_STEPS: TextClause = clause("reset_steps")

# db/sql/accept.sql
ACCEPT_JOB: TextClause = clause("accept_job")
ACCEPT_JOBS: TextClause = clause("accept_jobs")
JOB_BY_KEY: TextClause = clause("job_by_key")
LIVE_JOB_BY_UNIQUE_KEY: TextClause = clause("live_job_by_unique_key")

# db/sql/policies.sql
TAKE_POLICY_LOCKS: TextClause = clause("take_policy_locks")
UNIQUE_KEY_HOLDER: TextClause = clause("unique_key_holder")
DEBOUNCE_JOB: TextClause = clause("debounce_job")
HAND_OVER_UNIQUE_KEY: TextClause = clause("hand_over_unique_key")
TAKE_THROTTLE: TextClause = clause("take_throttle")
ACCEPT_POLICED_JOB: TextClause = clause("accept_policed_job")
TAKE_SEQUENCE_LOCKS: TextClause = clause("take_sequence_locks")
RELEASE_SEQUENCES: TextClause = clause("release_sequences")

# db/sql/sequences.sql
WAITING_SEQUENCES: TextClause = clause("waiting_sequences")

# db/sql/stats.sql
JOBS_BY_STATE: TextClause = clause("jobs_by_state")
OUTBOX_BACKLOG: TextClause = clause("outbox_backlog")
EXPIRED_LEASES: TextClause = clause("expired_leases")
RETRYING_SUMMARY: TextClause = clause("retrying_summary")
QUARANTINED_BY_CODE: TextClause = clause("quarantined_by_code")
FAILED_BY_CODE: TextClause = clause("failed_by_code")
PUBLISHED_NEVER_CLAIMED: TextClause = clause("published_never_claimed")
FINISHED_PER_MINUTE: TextClause = clause("finished_per_minute")
REDISPATCHED_RECENTLY: TextClause = clause("redispatched_recently")
BROKER_BLOCKS: TextClause = clause("broker_blocks")
NO_CONSUMER_BY_TYPE: TextClause = clause("no_consumer_by_type")
PAUSED_QUEUE_ROWS: TextClause = clause("paused_queue_rows")
CONSOLE_KEY: TextClause = clause("console_key")

# db/sql/clients.sql
INSERT_CLIENT: TextClause = clause("insert_client")
CLIENT_BY_TOKEN_HASH: TextClause = clause("client_by_token_hash")
SET_CLIENT_DISABLED: TextClause = clause("set_client_disabled")
ROTATE_CLIENT_TOKEN: TextClause = clause("rotate_client_token")
SET_CLIENT_RATE_LIMIT: TextClause = clause("set_client_rate_limit")
SET_CLIENT_TYPE_PATTERNS: TextClause = clause("set_client_type_patterns")
TAKE_RATE_TOKEN: TextClause = clause("take_rate_token")
LIST_CLIENTS: TextClause = clause("list_clients")
CLIENT_BY_ID_OR_NAME: TextClause = clause("client_by_id_or_name")

# db/sql/schedules.sql
SCHEDULER_CLIENT_ID: TextClause = clause("scheduler_client_id")
DATABASE_NOW: TextClause = clause("database_now")

# db/sql/relay.sql
LEASE_OUTBOX_BATCH: TextClause = clause("lease_outbox_batch")
LEASE_FLOW_PICK: TextClause = clause("lease_flow_pick")
LEASE_FLOW_PICK_LIMITED: TextClause = clause("lease_flow_pick_limited")
MARK_PUBLISHED: TextClause = clause("mark_published")
MARK_PUBLISH_FAILED: TextClause = clause("mark_publish_failed")
NEXT_OUTBOX_DUE_IN: TextClause = clause("next_outbox_due_in")
OLDEST_DUE_OUTBOX_AGE: TextClause = clause("oldest_due_outbox_age")
FLOW_CONTROLS: TextClause = clause("flow_controls")
REGISTER_QUEUES: TextClause = clause("register_queues")
RESCUE_EXPIRED_LEASES: TextClause = clause("rescue_expired_leases")
DELETE_PUBLISHED_OUTBOX: TextClause = clause("delete_published_outbox")
DELETE_FINISHED_JOBS: TextClause = clause("delete_finished_jobs")
FOLD_JOB_COUNTS: TextClause = clause("fold_job_counts")
REPORT_BROKER_BLOCK: TextClause = clause("report_broker_block")
CLEAR_BROKER_BLOCK: TextClause = clause("clear_broker_block")

# db/sql/execution.sql
CLAIM_JOBS: TextClause = clause("claim_jobs")
QUARANTINE_EXHAUSTED: TextClause = clause("quarantine_exhausted")
RECORD_EVENT: TextClause = clause("record_event")
RENEW_LEASE: TextClause = clause("renew_lease")
CANCELS_REQUESTED: TextClause = clause("cancels_requested")
FINISH_JOBS: TextClause = clause("finish_jobs")
FINISH_PLAIN_JOBS: TextClause = clause("finish_plain_jobs")
DEFER_UNKNOWN_TYPE: TextClause = clause("defer_unknown_type")
RELEASE_LEASE: TextClause = clause("release_lease")
ATTEMPT_TRACE: TextClause = clause("attempt_trace")
CLAIM_CANDIDATES: TextClause = clause("claim_candidates")
TAKE_SLOT_LOCKS: TextClause = clause("take_slot_locks")
RUNNING_IN_SLOTS: TextClause = clause("running_in_slots")
TAKE_TYPE_TOKEN: TextClause = clause("take_type_token")
TYPE_TOKEN_WAIT: TextClause = clause("type_token_wait")
HOLD_JOB: TextClause = clause("hold_job")
PARENT_RESULTS: TextClause = clause("parent_results")
REPORT_PROGRESS: TextClause = clause("report_progress")

# db/sql/quarantine.sql
REPLAY_JOB: TextClause = clause("replay_job")
LIST_QUARANTINED: TextClause = clause("list_quarantined")
QUARANTINED_IDS: TextClause = clause("quarantined_ids")
REDISPATCH_STRANDED: TextClause = clause("redispatch_stranded")
STRANDED_TYPES: TextClause = clause("stranded_types")
QUARANTINE_DELIVERY_LIMITED: TextClause = clause("quarantine_delivery_limited")
SET_LOCK_TIMEOUT: TextClause = clause("set_lock_timeout")
ADVISORY_XACT_LOCK: TextClause = clause("advisory_xact_lock")
TRY_ADVISORY_XACT_LOCK: TextClause = clause("try_advisory_xact_lock")
JOB_STATES: TextClause = clause("job_states")
QUARANTINED_WITHOUT_MESSAGE: TextClause = clause("quarantined_without_message")
QUARANTINED_COUNT: TextClause = clause("quarantined_count")
HEAL_LOST_MESSAGES: TextClause = clause("heal_lost_messages")

# db/sql/workflows.sql
ACCEPT_WORKFLOW: TextClause = clause("accept_workflow")
ONE_SNAPSHOT: TextClause = clause("one_snapshot")
WORKFLOW_BY_KEY: TextClause = clause("workflow_by_key")
WORKFLOW_BY_ID: TextClause = clause("workflow_by_id")
WORKFLOW_JOBS: TextClause = clause("workflow_jobs")
LIST_WORKFLOWS: TextClause = clause("list_workflows")
MARK_WORKFLOW_CANCELLED: TextClause = clause("mark_workflow_cancelled")
CANCEL_WORKFLOW_JOBS: TextClause = clause("cancel_workflow_jobs")

# db/sql/queues.sql
QUEUES: TextClause = clause("queues")
QUEUE_BACKLOGS: TextClause = clause("queue_backlogs")
QUEUE_RUNNING: TextClause = clause("queue_running")

# db/sql/flow.sql
QUEUE_ROWS: TextClause = clause("queue_rows")
PAUSE_QUEUE: TextClause = clause("pause_queue")
RESUME_QUEUE: TextClause = clause("resume_queue")
TYPE_LIMIT_ROWS: TextClause = clause("type_limit_rows")
TYPE_LIMIT_ROW: TextClause = clause("type_limit_row")
SET_TYPE_LIMIT: TextClause = clause("set_type_limit")
CLEAR_TYPE_LIMIT: TextClause = clause("clear_type_limit")
JOB_TYPE_NAMES: TextClause = clause("job_type_names")

# db/sql/types.sql
MARK_TYPES_SERVED: TextClause = clause("mark_types_served")
REGISTER_JOB_TYPES: TextClause = clause("register_job_types")
REGISTER_TYPE_POLICIES: TextClause = clause("register_type_policies")
JOB_TYPE_ROWS: TextClause = clause("job_type_rows")
RUNTIME_THROTTLE_ROWS: TextClause = clause("runtime_throttle_rows")

# db/sql/durable.sql
RECORD_STEPS: TextClause = clause("record_steps")
LOCK_FOR_WAIT: TextClause = clause("lock_for_wait")
FENCED_JOB: TextClause = clause("fenced_job")
STEP_OF_JOB: TextClause = clause("step_of_job")
TAKE_SIGNAL: TextClause = clause("take_signal")
TIME_OUT_WAIT: TextClause = clause("time_out_wait")
SLEEP_JOB: TextClause = clause("sleep_job")
ADOPT_CHILD: TextClause = clause("adopt_child")
RECORD_CHILD: TextClause = clause("record_child")
CHILD_END: TextClause = clause("child_end")

# db/sql/django.sql
DJANGO_TASK_RESULT: TextClause = clause("django_task_result")

# db/sql/sessions.sql
LISTENER_PING: TextClause = clause("listener_ping")
SERVER_PID: TextClause = clause("server_pid")


_BY_NAME = {transition.name: transition for transition in ALL_TRANSITIONS}

# Which statement makes which move, from each statement's ``-- makes:`` line (KeyError at import
# for a name that is no transition of core/states.py): tests/unit/test_transitions.py checks
# each is guarded by its transitions, tests/integration/test_transition_guards.py what the
# guards let through.
STATE_WRITES: dict[str, tuple[Transition, ...]] = {
    name.upper(): tuple(_BY_NAME[made] for made in statement.makes)
    for name, statement in STATEMENTS.items()
    if statement.makes
}
