"""Order and submission policies (docs/flow-control.md): sequences, deduplication windows,
debounce and throttles.

- The journal's ``released``: a job of a sequence let go when the one ahead of it ended.
- ``jobs.sequence_key``: the jobs of a client and sequence key run one at a time, in the order
  of ``jobs.sequence_no`` (drawn from ``job_sequence_order`` while the accept holds the key's
  lock, so it is the order they were accepted in). ``jobs.sequence_waits``: queued behind the
  one ahead of it, with no outbox row yet; the transaction that ends that one releases it.
  ``ix_jobs_sequence_unfinished``: a key's jobs that have not succeeded or been cancelled,
  in order; plain jobs never enter it.
- ``ix_jobs_unique_ended``: the ended jobs of a unique key, newest first, for a window.
- ``throttle_accepts``: when each submission of a throttled type (per throttle key, '' for
  none) was accepted within its throttle's period; the accept that finds one over the period
  deletes it.
- ``type_limits.throttle_count`` / ``throttle_period_seconds``: a throttle set at runtime;
  ``job_types.throttle_count`` / ``throttle_period_seconds`` / ``unique_for_seconds``: the
  code's, for an API without the handlers and for operators.

New columns are nullable or default: nothing is rewritten; the new indexes hold no plain job.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

import importlib

import sqlalchemy as sa
from alembic import op

from jobrelay.db.history import EVENTS_0016, EVENTS_0019, in_list

revision = "0019"
down_revision = "0018"  # no branch labels, no dependencies

# 0009's: a CHECK swapped NOT VALID, then validated.
_swap_check = importlib.import_module("jobrelay.migrations.versions.0009_workflows")._swap_check
EVENT_CHECK = "ck_job_events_ck_job_events_event_known"
_UNFINISHED = "sequence_key IS NOT NULL AND state NOT IN ('succeeded', 'cancelled')"
_THROTTLE_PERIODS = "throttle_period_seconds IN (1, 60, 3600)"


def _throttle_columns(table: str) -> None:
    op.add_column(table, sa.Column("throttle_count", sa.Integer(), nullable=True))
    op.add_column(table, sa.Column("throttle_period_seconds", sa.Integer(), nullable=True))
    op.create_check_constraint(
        op.f(f"ck_{table}_throttle_count_positive"), table, "throttle_count >= 1"
    )
    op.create_check_constraint(op.f(f"ck_{table}_throttle_period_known"), table, _THROTTLE_PERIODS)
    op.create_check_constraint(
        op.f(f"ck_{table}_throttle_whole"),
        table,
        "(throttle_count IS NULL) = (throttle_period_seconds IS NULL)",
    )


def upgrade() -> None:
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0019))
    op.execute("CREATE SEQUENCE job_sequence_order")
    op.add_column("jobs", sa.Column("sequence_key", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("sequence_no", sa.BigInteger(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column("sequence_waits", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_check_constraint(
        op.f("ck_jobs_sequence_key_length"), "jobs", "char_length(sequence_key) <= 200"
    )
    op.create_check_constraint(
        op.f("ck_jobs_sequence_whole"),
        "jobs",
        "(sequence_key IS NULL) = (sequence_no IS NULL) AND (sequence_key IS NOT NULL "
        "OR NOT sequence_waits)",
    )
    op.create_index(
        "ix_jobs_sequence_unfinished",
        "jobs",
        ["client_id", "sequence_key", "sequence_no"],
        postgresql_where=sa.text(_UNFINISHED),
    )
    op.create_index(
        "ix_jobs_unique_ended",
        "jobs",
        ["client_id", "type", "unique_key", "finished_at"],
        postgresql_where=sa.text("unique_key IS NOT NULL AND finished_at IS NOT NULL"),
    )
    op.create_table(
        "throttle_accepts",
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_throttle_accepts_type_key_at", "throttle_accepts", ["type", "key", "at"])
    _throttle_columns("type_limits")
    _throttle_columns("job_types")
    op.add_column("job_types", sa.Column("unique_for_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_types", "unique_for_seconds")
    for table in ("job_types", "type_limits"):
        op.drop_column(table, "throttle_period_seconds")
        op.drop_column(table, "throttle_count")
    op.drop_table("throttle_accepts")
    op.drop_index("ix_jobs_unique_ended", table_name="jobs")
    op.drop_index("ix_jobs_sequence_unfinished", table_name="jobs")
    op.drop_constraint(op.f("ck_jobs_sequence_whole"), "jobs", type_="check")
    op.drop_constraint(op.f("ck_jobs_sequence_key_length"), "jobs", type_="check")
    for column in ("sequence_waits", "sequence_no", "sequence_key"):
        op.drop_column("jobs", column)
    op.execute("DROP SEQUENCE job_sequence_order")
    op.execute("DELETE FROM job_events WHERE event = 'released'")
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0016))
