"""Storage that stays flat: counts without scans, and indexes that hold only what is read.

- ``job_totals`` and ``job_count_deltas``: how many finished jobs there are, by state and error
  code, so the stats read a few rows instead of counting every job. Row triggers on ``jobs``
  whose WHEN clause lets through only rows entering or leaving a finished state append +1 or -1
  to ``job_count_deltas`` (append-only: no row is updated twice in a transaction, so a bulk
  change of a million jobs costs a million appends, not a chain of a million versions); the
  dispatcher's maintenance folds the deltas into ``job_totals`` every few seconds
  (``queries.FOLD_JOB_COUNTS``). The totals are filled from the existing jobs in the same
  transaction that creates the triggers: writes to ``jobs`` wait for that count (at one million
  jobs on the development machine, a writer waited at most 0.38–0.46 s; ``benchmarks/upgrade.py``).
- ``ix_jobs_live_state_available_at`` replaces ``ix_jobs_state_available_at``: only queued,
  running and retrying jobs, so counting live jobs and finding stranded ones reads those alone,
  and a finished job leaves the index instead of staying in it forever.
- ``ix_jobs_state_finished_at``: finished jobs by state and finish time, for retention (the
  oldest first, in batches) and the quarantine listing.
- ``ix_job_events_redispatched_at`` replaces ``ix_job_events_at``: the stats count the last
  hour's redispatches from it; nothing else reads the journal by time (finished jobs' events
  now go with their job).

The indexes are built and dropped CONCURRENTLY, outside the migration's transaction, so no
write waits for them. The whole upgrade took 2.3–2.8 s at one million jobs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from jobrelay.db.history import LIVE_STATES_0003, TERMINAL_STATES_0001, in_list

revision = "0003"
down_revision = "0002"  # no branch labels, no dependencies

_TERMINAL_LIST = ", ".join(repr(state) for state in TERMINAL_STATES_0001)

# A row that leaves a finished state counts -1 under its old (state, code), one that enters +1
# under its new one. The triggers' WHEN clauses, which PostgreSQL evaluates without calling the
# function, let through only such rows: accepts, claims, renewals and retries never run it.
COUNT_FINISHED = f"""
CREATE FUNCTION jobrelay_count_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state IN ({_TERMINAL_LIST}) THEN
        INSERT INTO job_count_deltas (state, code, n)
        VALUES (OLD.state, coalesce(OLD.last_error_code, ''), -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state IN ({_TERMINAL_LIST}) THEN
        INSERT INTO job_count_deltas (state, code, n)
        VALUES (NEW.state, coalesce(NEW.last_error_code, ''), 1);
    END IF;
    RETURN NULL;
END
$$
"""


def _finished(row: str) -> str:
    return f"{row}.state IN ({_TERMINAL_LIST})"


TRIGGERS = {
    "INSERT": f"WHEN ({_finished('NEW')})",
    "UPDATE": (
        "WHEN ((OLD.state, OLD.last_error_code) IS DISTINCT FROM (NEW.state, NEW.last_error_code)"
        f" AND ({_finished('OLD')} OR {_finished('NEW')}))"
    ),
    "DELETE": f"WHEN ({_finished('OLD')})",
}


def upgrade() -> None:
    op.create_table(
        "job_totals",
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("state", "code", name="pk_job_totals"),
    )
    op.create_table(
        "job_count_deltas",
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
    )
    op.execute(COUNT_FINISHED)
    for event, condition in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER jobs_count_finished_{event.lower()} AFTER {event} ON jobs "
            f"FOR EACH ROW {condition} EXECUTE FUNCTION jobrelay_count_finished()"
        )
    # The triggers hold a lock that makes writers wait until this transaction commits, so
    # no finish is counted twice or missed between the count and the triggers.
    op.execute(
        "INSERT INTO job_totals (state, code, n) "
        "SELECT state, coalesce(last_error_code, ''), count(*) "
        f"FROM jobs WHERE {_finished('jobs')} GROUP BY 1, 2"
    )
    with op.get_context().autocommit_block():
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_jobs_live_state_available_at "
            f"ON jobs (state, available_at) WHERE {in_list('state', LIVE_STATES_0003)}"
        )
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_jobs_state_finished_at "
            "ON jobs (state, finished_at) WHERE finished_at IS NOT NULL"
        )
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_job_events_redispatched_at "
            "ON job_events (at) WHERE event = 'redispatched'"
        )
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_state_available_at")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_job_events_at")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_jobs_state_available_at "
            "ON jobs (state, available_at)"
        )
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_job_events_at ON job_events (at)")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_live_state_available_at")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_state_finished_at")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_job_events_redispatched_at")
    for event in TRIGGERS:
        op.execute(f"DROP TRIGGER jobs_count_finished_{event.lower()} ON jobs")
    op.execute("DROP FUNCTION jobrelay_count_finished()")
    op.drop_table("job_count_deltas")
    op.drop_table("job_totals")
