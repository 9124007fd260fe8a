"""Initial schema: clients, jobs, outbox, job_results, job_events, and the outbox NOTIFY trigger.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

from jobrelay.db.history import EVENTS_0001, STATES_0001, TERMINAL_STATES_0001, in_list

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _now() -> sa.TextClause:
    return sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "clients",
        sa.Column("id", UUID(as_uuid=True), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint("char_length(name) BETWEEN 1 AND 100", name="ck_clients_name_length"),
        sa.PrimaryKeyConstraint("id", name="pk_clients"),
        sa.UniqueConstraint("name", name="uq_clients_name"),
        sa.UniqueConstraint("token_hash", name="uq_clients_token_hash"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", UUID(as_uuid=True), nullable=False),
        sa.Column("client_id", UUID(as_uuid=True), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("request_hash", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("payload", JSONB(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column(
            "available_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False
        ),
        sa.Column("lease_token", UUID(as_uuid=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error_code", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(in_list("state", STATES_0001), name="ck_jobs_state_known"),
        sa.CheckConstraint(
            "(state = 'running') = (lease_token IS NOT NULL AND lease_until IS NOT NULL)",
            name="ck_jobs_lease_iff_running",
        ),
        sa.CheckConstraint(
            "(lease_token IS NULL) = (lease_until IS NULL)", name="ck_jobs_lease_whole"
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND attempts <= max_attempts", name="ck_jobs_attempts_in_bounds"
        ),
        sa.CheckConstraint("max_attempts >= 1", name="ck_jobs_max_attempts_positive"),
        sa.CheckConstraint(
            "char_length(idempotency_key) BETWEEN 1 AND 200",
            name="ck_jobs_idempotency_key_length",
        ),
        sa.CheckConstraint(
            f"({in_list('state', TERMINAL_STATES_0001)}) = (finished_at IS NOT NULL)",
            name="ck_jobs_finished_iff_terminal",
        ),
        sa.ForeignKeyConstraint(["client_id"], ["clients.id"], name="fk_jobs_client_id_clients"),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint(
            "client_id", "idempotency_key", name="uq_jobs_client_id_idempotency_key"
        ),
    )
    op.create_index("ix_jobs_client_id_created_at_id", "jobs", ["client_id", "created_at", "id"])
    op.create_index("ix_jobs_state_available_at", "jobs", ["state", "available_at"])
    op.create_index(
        "ix_jobs_lease_until_running",
        "jobs",
        ["lease_until"],
        postgresql_where=sa.text("state = 'running'"),
    )

    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", UUID(as_uuid=True), nullable=False),
        sa.Column(
            "available_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("publish_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_outbox_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
    )
    op.create_index(
        "ix_outbox_available_at_unpublished",
        "outbox",
        ["available_at"],
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.create_index(
        "ix_outbox_published_at_published",
        "outbox",
        ["published_at"],
        postgresql_where=sa.text("published_at IS NOT NULL"),
    )
    op.create_index("ix_outbox_job_id", "outbox", ["job_id"])

    op.create_table(
        "job_results",
        sa.Column("job_id", UUID(as_uuid=True), nullable=False),
        sa.Column("result", JSONB(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_results_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_results"),
    )

    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", UUID(as_uuid=True), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.CheckConstraint(in_list("event", EVENTS_0001), name="ck_job_events_event_known"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])
    op.create_index("ix_job_events_at", "job_events", ["at"])

    # Wake the dispatcher when outbox rows appear. One notification per statement, not per row:
    # NOTIFY takes a global lock at commit, and the dispatcher reads a whole batch anyway.
    op.execute(
        """
        CREATE FUNCTION jobrelay_notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('jobrelay_outbox', '');
            RETURN NULL;
        END;
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
        FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_notify_outbox()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS outbox_notify ON outbox")
    op.execute("DROP FUNCTION IF EXISTS jobrelay_notify_outbox()")
    op.drop_table("job_events")
    op.drop_table("job_results")
    op.drop_table("outbox")
    op.drop_table("jobs")
    op.drop_table("clients")
