"""Scheduling and control: delayed jobs, the scheduler's client, cancelling a running job, and
a notification when a job finishes.

- ``jobs.run_at``: the due time a submission asked for (``run_at`` or ``delay_seconds``); empty
  for a job due at once. ``available_at`` starts there, and moves with retries.
- ``jobs.cancel_requested_at``: a cancel asked of a running job; the consumer's heartbeat
  carries it to the handler. The journal records it as ``cancel_requested``.
- The built-in client ``jobrelay-scheduler`` owns the jobs of periodic schedules. Its token hash
  is not a SHA-256 of anything, so no token is ever it.
- ``jobs_notify_finished``: each job entering a finished state notifies
  ``jobrelay_jobs_finished`` with its id, for ``GET /v1/jobs/{id}?wait=``. The WHEN clause lets
  through only those rows: nothing else on the hot path runs it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from jobrelay.db.history import EVENTS_0002, EVENTS_0005, TERMINAL_STATES_0001, in_list

revision = "0005"
down_revision = "0004"  # no branch labels, no dependencies

SCHEDULER_CLIENT = "jobrelay-scheduler"
SCHEDULER_TOKEN_HASH = "none: the scheduler has no token"
EVENT_CHECK = "ck_job_events_ck_job_events_event_known"

NOTIFY_FINISHED = """
CREATE FUNCTION jobrelay_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobrelay_jobs_finished', NEW.id::text);
    RETURN NULL;
END
$$
"""


def _swap_event_check(values: tuple[str, ...]) -> None:
    op.execute(f"ALTER TABLE job_events DROP CONSTRAINT {EVENT_CHECK}")
    op.execute(
        f"ALTER TABLE job_events ADD CONSTRAINT {EVENT_CHECK} "
        f"CHECK ({in_list('event', values)}) NOT VALID"
    )
    op.execute(f"ALTER TABLE job_events VALIDATE CONSTRAINT {EVENT_CHECK}")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("run_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "jobs", sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True)
    )
    _swap_event_check(EVENTS_0005)
    op.execute(
        "INSERT INTO clients (id, name, token_hash) "
        f"VALUES (gen_random_uuid(), '{SCHEDULER_CLIENT}', '{SCHEDULER_TOKEN_HASH}') "
        "ON CONFLICT DO NOTHING"
    )
    op.execute(NOTIFY_FINISHED)
    terminal = in_list("NEW.state", TERMINAL_STATES_0001)
    op.execute(
        "CREATE TRIGGER jobs_notify_finished AFTER UPDATE ON jobs FOR EACH ROW "
        f"WHEN (OLD.state IS DISTINCT FROM NEW.state AND {terminal}) "
        "EXECUTE FUNCTION jobrelay_notify_finished()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_notify_finished ON jobs")
    op.execute("DROP FUNCTION jobrelay_notify_finished()")
    op.execute("DELETE FROM job_events WHERE event = 'cancel_requested'")
    _swap_event_check(EVENTS_0002)
    op.drop_column("jobs", "cancel_requested_at")
    op.drop_column("jobs", "run_at")
