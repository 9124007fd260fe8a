"""Storage that stays flat: counts without scans, and indexes that hold only what is read.

- ``job_totals``: how many finished jobs there are, by state and error code, kept by statement
  triggers on ``jobs`` (a group of finishes is one counter update), so the stats read a few
  rows instead of counting every job. Spread over 8 shards (by backend) so that consumers
  finishing at once do not queue on one counter row. Filled from the existing jobs in the same
  transaction that creates the triggers: writes to ``jobs`` wait for that count (at one million
  jobs on the development machine, a writer waited at most 0.46 s; ``benchmarks/upgrade.py``).
- ``ix_jobs_live_state_available_at`` replaces ``ix_jobs_state_available_at``: only queued,
  running and retrying jobs, so counting live jobs and finding stranded ones reads those alone,
  and a finished job leaves the index instead of staying in it forever.
- ``ix_jobs_state_finished_at``: finished jobs by state and finish time, for retention (the
  oldest first, in batches) and the quarantine listing.
- ``ix_job_events_redispatched_at`` replaces ``ix_job_events_at``: the stats count the last
  hour's redispatches from it; nothing else reads the journal by time (finished jobs' events
  now go with their job).

The indexes are built and dropped CONCURRENTLY, outside the migration's transaction, so no
write waits for them. The whole upgrade took 2.3 s at one million jobs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from jobrelay.migrations.history import LIVE_STATES_0003, TERMINAL_STATES_0001, in_list

revision = "0003"
down_revision = "0002"  # no branch labels, no dependencies

SHARDS = 8
_TERMINAL = in_list("state", TERMINAL_STATES_0001)

# One function for the three triggers: rows entering a terminal state count +1 under their
# (state, code), rows leaving one count -1; an update that moves nothing nets to zero.
COUNT_FINISHED = f"""
CREATE FUNCTION jobrelay_count_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_totals AS t (state, code, shard, n)
        SELECT state, coalesce(last_error_code, ''), pg_backend_pid() % {SHARDS}, count(*)
        FROM new_rows WHERE {_TERMINAL} GROUP BY 1, 2
        ON CONFLICT (state, code, shard) DO UPDATE SET n = t.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_totals AS t (state, code, shard, n)
        SELECT state, coalesce(last_error_code, ''), pg_backend_pid() % {SHARDS}, -count(*)
        FROM old_rows WHERE {_TERMINAL} GROUP BY 1, 2
        ON CONFLICT (state, code, shard) DO UPDATE SET n = t.n + excluded.n;
    ELSE
        INSERT INTO job_totals AS t (state, code, shard, n)
        SELECT state, code, pg_backend_pid() % {SHARDS}, sum(delta)
        FROM (
            SELECT state, coalesce(last_error_code, '') AS code, 1 AS delta
            FROM new_rows WHERE {_TERMINAL}
            UNION ALL
            SELECT state, coalesce(last_error_code, ''), -1 FROM old_rows WHERE {_TERMINAL}
        ) AS moved
        GROUP BY 1, 2 HAVING sum(delta) <> 0
        ON CONFLICT (state, code, shard) DO UPDATE SET n = t.n + excluded.n;
    END IF;
    RETURN NULL;
END
$$
"""

TRIGGERS = {
    "INSERT": "REFERENCING NEW TABLE AS new_rows",
    "UPDATE": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "DELETE": "REFERENCING OLD TABLE AS old_rows",
}


def upgrade() -> None:
    op.create_table(
        "job_totals",
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("state", "code", "shard", name="pk_job_totals"),
    )
    op.execute(COUNT_FINISHED)
    for event, referencing in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER jobs_count_finished_{event.lower()} AFTER {event} ON jobs "
            f"{referencing} FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_count_finished()"
        )
    # The triggers hold a lock that makes writers wait until this transaction commits, so
    # no finish is counted twice or missed between the count and the triggers.
    op.execute(
        "INSERT INTO job_totals (state, code, shard, n) "
        "SELECT state, coalesce(last_error_code, ''), 0, count(*) "
        f"FROM jobs WHERE {_TERMINAL} GROUP BY 1, 2"
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
    op.drop_table("job_totals")
