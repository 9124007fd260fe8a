"""Observability: a job's trace context, and the console's signing key.

- ``jobs.traceparent``: the W3C trace context of the span that accepted the job (or of the
  submitter, when tracing is off), carried in the job's messages so that the dispatcher's publish
  and the consumer's execution join the submitter's trace (docs/observability.md). Empty for jobs
  accepted before this revision and for jobs submitted without one while tracing is off.
- ``console_keys``: the key the console signs its session cookies and CSRF tokens with, made
  once here so that every API process and worker shares it without a setting
  (``JOBRELAY_CONSOLE_SECRET`` overrides it). Two version-4 UUIDs give 244 random bits; the
  built-in ``gen_random_uuid`` needs no extension.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"  # no branch labels, no dependencies


def upgrade() -> None:
    op.add_column("jobs", sa.Column("traceparent", sa.Text(), nullable=True))
    op.create_table(
        "console_keys",
        sa.Column("id", sa.SmallInteger(), primary_key=True),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.CheckConstraint("id = 1", name="one_key"),
        sa.CheckConstraint("octet_length(secret) >= 30", name="secret_long_enough"),
    )
    op.execute(
        "INSERT INTO console_keys (id, secret) VALUES (1, decode(replace("
        "gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'))"
    )


def downgrade() -> None:
    op.drop_table("console_keys")
    op.drop_column("jobs", "traceparent")
