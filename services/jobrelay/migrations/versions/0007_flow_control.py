"""Flow control (docs/flow-control.md): priorities, concurrency and rate limits, paused queues,
unique jobs.

- ``jobs.priority`` (-100..100, higher runs first), ``jobs.concurrency_key`` and
  ``jobs.unique_key`` (at most 200 characters each; empty for a job without one).
- ``ux_jobs_live_unique_key``: at most one live (queued, running, retrying) job per client, type
  and unique key; concurrent submissions of one key make one job because this index refuses the
  others.
- ``ix_jobs_running_type_key``: the running jobs by type and concurrency key, the slots in use.
- ``outbox.priority``, ``outbox.client_id``, ``outbox.type``: copies of the job's, written by
  every insert into the outbox, so the relay orders and shares out its pick without reading
  ``jobs``. Empty (and priority 0) in rows written before this revision. ``client_id`` has no
  foreign key: the job's own carries it, and a second one would be checked on every insert.
- ``queues``: the work queues by short name (``default``, ``slow``); paused while ``paused_at``
  is set, so a pause survives restarts. Seeded with ``default``; services add their own.
- ``type_limits``: runtime overrides of a type's limit (``jobrelay limits set``); a row is the
  limit in force.
- ``type_rate_buckets`` (UNLOGGED): per type and key ('' when not per key), the time from which
  the next start fits the type's rate (the generic cell rate algorithm, like ``rate_limits``).
- A new journal event, ``held``: a delivery put back without a claim (a paused queue, a limit).

``jobs.priority`` has a constant default, which PostgreSQL stores in the catalogue: adding it
rewrites nothing. The checks are added NOT VALID, then validated, which does not lock out writes;
the indexes are built CONCURRENTLY, outside the migration's transaction.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from jobrelay.db.history import EVENTS_0005, EVENTS_0007, LIVE_STATES_0003, in_list

revision = "0007"
down_revision = "0006"  # no branch labels, no dependencies

EVENT_CHECK = "ck_job_events_ck_job_events_event_known"
CHECKS = {
    "jobs": {
        "ck_jobs_priority_range": "priority BETWEEN -100 AND 100",
        "ck_jobs_concurrency_key_length": "char_length(concurrency_key) <= 200",
        "ck_jobs_unique_key_length": "char_length(unique_key) <= 200",
    },
    "outbox": {"ck_outbox_priority_range": "priority BETWEEN -100 AND 100"},
}


def _add_checks() -> None:
    for table, checks in CHECKS.items():
        for name, condition in checks.items():
            # NOT VALID, then VALIDATE: the check of existing rows does not lock the table.
            op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
            op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def _swap_event_check(values: tuple[str, ...]) -> None:
    op.execute(f"ALTER TABLE job_events DROP CONSTRAINT {EVENT_CHECK}")
    op.execute(
        f"ALTER TABLE job_events ADD CONSTRAINT {EVENT_CHECK} "
        f"CHECK ({in_list('event', values)}) NOT VALID"
    )
    op.execute(f"ALTER TABLE job_events VALIDATE CONSTRAINT {EVENT_CHECK}")


def _priority() -> sa.Column[int]:
    return sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0"))


def upgrade() -> None:
    op.add_column("jobs", _priority())
    op.add_column("jobs", sa.Column("concurrency_key", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("unique_key", sa.Text(), nullable=True))
    op.add_column("outbox", _priority())
    op.add_column("outbox", sa.Column("client_id", sa.Uuid(), nullable=True))
    op.add_column("outbox", sa.Column("type", sa.Text(), nullable=True))
    _add_checks()
    _swap_event_check(EVENTS_0007)
    op.create_table(
        "queues",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("paused_by", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("name", name="pk_queues"),
    )
    op.execute("INSERT INTO queues (name) VALUES ('default') ON CONFLICT DO NOTHING")
    op.create_table(
        "type_limits",
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate_count", sa.Integer(), nullable=True),
        sa.Column("rate_period_seconds", sa.Integer(), nullable=True),
        sa.Column("per_key", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("type", name="pk_type_limits"),
        sa.CheckConstraint("concurrency >= 1", name="ck_type_limits_concurrency_positive"),
        sa.CheckConstraint("rate_count >= 1", name="ck_type_limits_rate_count_positive"),
        sa.CheckConstraint(
            "rate_period_seconds IN (1, 60)", name="ck_type_limits_rate_period_known"
        ),
        sa.CheckConstraint(
            "(rate_count IS NULL) = (rate_period_seconds IS NULL)",
            name="ck_type_limits_rate_whole",
        ),
    )
    op.create_table(
        "type_rate_buckets",
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("allowed_from", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("type", "key", name="pk_type_rate_buckets"),
        prefixes=["UNLOGGED"],
    )
    with op.get_context().autocommit_block():
        op.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ux_jobs_live_unique_key "
            "ON jobs (client_id, type, unique_key) "
            f"WHERE unique_key IS NOT NULL AND {in_list('state', LIVE_STATES_0003)}"
        )
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_jobs_running_type_key "
            "ON jobs (type, concurrency_key) WHERE state = 'running'"
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_running_type_key")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ux_jobs_live_unique_key")
    op.drop_table("type_rate_buckets")
    op.drop_table("type_limits")
    op.drop_table("queues")
    op.execute("DELETE FROM job_events WHERE event = 'held'")
    _swap_event_check(EVENTS_0005)
    for table, checks in CHECKS.items():
        for name in checks:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.drop_column("outbox", "type")
    op.drop_column("outbox", "client_id")
    op.drop_column("outbox", "priority")
    op.drop_column("jobs", "unique_key")
    op.drop_column("jobs", "concurrency_key")
    op.drop_column("jobs", "priority")
