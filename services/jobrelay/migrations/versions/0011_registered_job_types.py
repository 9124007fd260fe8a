"""Job types registered by the consumers (docs/job-types.md, "Registered types").

- ``job_types``: one row per type a consumer registered at start: its payload JSON Schema,
  its defaults (``max_attempts`` NULL for the deployment's, ``priority``, ``timeout_seconds``),
  the code's limit (``concurrency``, ``rate_count`` per ``rate_period_seconds``, ``per_key``),
  its description, and which consumer registered it last and when. An API without the
  handlers of a type validates its submissions against the schema.

A new table only: nothing existing is locked or rewritten.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"  # no branch labels, no dependencies


def upgrade() -> None:
    op.create_table(
        "job_types",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("payload_schema", postgresql.JSONB(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=True),
        sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("timeout_seconds", sa.Float(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate_count", sa.Integer(), nullable=True),
        sa.Column("rate_period_seconds", sa.Integer(), nullable=True),
        sa.Column("per_key", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("description", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("registered_by", sa.Text(), nullable=False),
        sa.Column(
            "registered_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("name", name="pk_job_types"),
        sa.CheckConstraint("max_attempts >= 1", name="ck_job_types_max_attempts_positive"),
        sa.CheckConstraint("priority BETWEEN -100 AND 100", name="ck_job_types_priority_range"),
        sa.CheckConstraint("timeout_seconds > 0", name="ck_job_types_timeout_positive"),
    )


def downgrade() -> None:
    op.drop_table("job_types")
