"""Readable failures, deferred unknown types, re-published lost messages, token rotation.

- ``job_events.error``: the failed attempt's exception (class, message, traceback), masked.
- ``jobs.type_unknown_since``: when a consumer first met this job's type without knowing it;
  the job is quarantined ``unknown_job_type`` only once the type stayed unknown for the
  configured patience.
- events ``deferred`` (a consumer did not know the type) and ``redispatched`` (a message the
  broker should hold was provably missing and was published again).
- ``clients.previous_token_hash`` / ``previous_token_expires_at``: a rotated token keeps
  working until its grace period ends.

Every change adds a nullable column or swaps a CHECK constraint (validated separately, so
the table is not locked while existing rows are checked).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from jobrelay.db.history import EVENTS_0001, EVENTS_0002, in_list

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _swap_event_check(values: Sequence[str]) -> None:
    op.execute("ALTER TABLE job_events DROP CONSTRAINT ck_job_events_ck_job_events_event_known")
    op.execute(
        "ALTER TABLE job_events ADD CONSTRAINT ck_job_events_ck_job_events_event_known "
        f"CHECK ({in_list('event', values)}) NOT VALID"
    )
    op.execute("ALTER TABLE job_events VALIDATE CONSTRAINT ck_job_events_ck_job_events_event_known")


def upgrade() -> None:
    op.add_column("job_events", sa.Column("error", JSONB))
    op.add_column("jobs", sa.Column("type_unknown_since", sa.DateTime(timezone=True)))
    op.add_column("clients", sa.Column("previous_token_hash", sa.Text))
    op.add_column("clients", sa.Column("previous_token_expires_at", sa.DateTime(timezone=True)))
    op.execute(
        "ALTER TABLE clients ADD CONSTRAINT ck_clients_previous_token_whole "
        "CHECK ((previous_token_hash IS NULL) = (previous_token_expires_at IS NULL))"
    )
    op.create_index(
        "ix_clients_previous_token_hash",
        "clients",
        ["previous_token_hash"],
        unique=True,
        postgresql_where=sa.text("previous_token_hash IS NOT NULL"),
    )
    _swap_event_check(EVENTS_0002)


def downgrade() -> None:
    op.execute("DELETE FROM job_events WHERE event IN ('deferred', 'redispatched')")
    _swap_event_check(EVENTS_0001)
    op.drop_index("ix_clients_previous_token_hash", table_name="clients")
    op.execute("ALTER TABLE clients DROP CONSTRAINT ck_clients_previous_token_whole")
    op.drop_column("clients", "previous_token_expires_at")
    op.drop_column("clients", "previous_token_hash")
    op.drop_column("jobs", "type_unknown_since")
    op.drop_column("job_events", "error")
