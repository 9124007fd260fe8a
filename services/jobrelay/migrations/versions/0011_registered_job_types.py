"""Job types registered by the consumers (docs/job-types.md, "Registered types").

- ``job_types``: one row per type a consumer registered at start: its payload JSON Schema,
  its defaults (``max_attempts`` NULL for the deployment's, ``priority``, ``timeout_seconds``),
  the code's limit (``concurrency``, ``rate_count`` per ``rate_period_seconds``, ``per_key``),
  its description, and which consumer registered it last and when. An API without the
  handlers of a type validates its submissions against the schema.

- ``jobrelay_type_defaults(type)`` (migration 0010's) now reads them: a job enqueued from SQL
  (``jobrelay_enqueue``) with no priority gets its registered type's, and the type's
  ``max_attempts`` (3 when none is registered, or the type registered none), as the API gives.

A new table and a function replaced: nothing existing is locked or rewritten.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from jobrelay.db.history import DEFAULT_MAX_ATTEMPTS_0010

revision = "0011"
down_revision = "0010"  # no branch labels, no dependencies


# CREATE OR REPLACE drops the function's SET clauses: the search_path is pinned again, as 0010
# pins it (jobrelay_enqueue's rows go to jobrelay's tables whatever the caller's path).
def _type_defaults(body: str) -> None:
    op.execute(f"""
CREATE OR REPLACE FUNCTION jobrelay_type_defaults(job_type text, OUT max_attempts int,
                                                  OUT priority int)
LANGUAGE sql STABLE
AS $$ {body} $$
""")
    op.execute("""
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.jobrelay_type_defaults(text) '
                   'SET search_path = pg_catalog, %I, pg_temp',
                   current_schema(), current_schema());
END
$$
""")


REGISTERED_DEFAULTS = f"""
SELECT coalesce(registered.max_attempts, {DEFAULT_MAX_ATTEMPTS_0010}),
       coalesce(registered.priority, 0)
FROM (SELECT 1) AS one LEFT JOIN job_types AS registered ON registered.name = job_type
"""
FROZEN_DEFAULTS = f"SELECT {DEFAULT_MAX_ATTEMPTS_0010}, 0"


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
    _type_defaults(REGISTERED_DEFAULTS)


def downgrade() -> None:
    _type_defaults(FROZEN_DEFAULTS)
    op.drop_table("job_types")
