"""Workflows (docs/workflows.md): jobs that wait for other jobs, and progress while they run.

- ``workflows``: one row per submitted workflow, idempotent by (client, key) like a job; its
  ``on_failure`` (``cancel_dependents`` or ``continue``) and when it was cancelled.
- ``jobs.workflow_id`` and ``jobs.workflow_ref`` (the job's name within it), ``jobs.waiting_for``
  (how many of its parents have not succeeded yet: it is queued when that reaches 0, by the
  statement that stores the last parent's result) and ``jobs.progress`` (what its handler last
  reported: ``{"fraction", "message", "at"}``).
- ``job_dependencies`` (job, parent): the edges, read both ways (a job's parents on claim, a
  finished job's children when it ends); they go with either job (ON DELETE CASCADE).
- A new state, ``waiting``, and two journal events, ``parents_succeeded`` and ``restored``.
  The live partial indexes are rebuilt with ``waiting`` among the live states (CONCURRENTLY,
  under a new name, then swapped), so the stats count waiting jobs through them and a unique
  key stays unique over them.

The new columns have no default that needs a rewrite (``waiting_for`` 0 is a catalogue default);
the checks are added NOT VALID, then validated, which does not lock out writes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from jobrelay.db.history import (
    EVENTS_0007,
    EVENTS_0009,
    LIVE_STATES_0003,
    LIVE_STATES_0009,
    ON_FAILURE_0009,
    STATES_0001,
    STATES_0009,
    in_list,
)

revision = "0009"
down_revision = "0008"  # no branch labels, no dependencies

STATE_CHECK = "ck_jobs_ck_jobs_state_known"
EVENT_CHECK = "ck_job_events_ck_job_events_event_known"


def _swap_check(table: str, name: str, condition: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def _live_indexes(live: tuple[str, ...]) -> dict[str, str]:
    states = in_list("state", live)
    return {
        "ix_jobs_live_state_available_at": f"ON jobs (state, available_at) WHERE {states}",
        "ux_jobs_live_unique_key": (
            f"ON jobs (client_id, type, unique_key) WHERE unique_key IS NOT NULL AND {states}"
        ),
    }


def _rebuild_live_indexes(live: tuple[str, ...]) -> None:
    """Each index built anew beside the old one, then put in its place: reads and writes go on."""
    with op.get_context().autocommit_block():
        for name, definition in _live_indexes(live).items():
            unique = "UNIQUE " if name.startswith("ux_") else ""
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}_next")
            op.execute(f"CREATE {unique}INDEX CONCURRENTLY {name}_next {definition}")
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"ALTER INDEX {name}_next RENAME TO {name}")


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.Uuid(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("request_hash", sa.Text(), nullable=False),
        sa.Column("on_failure", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_workflows"),
        sa.ForeignKeyConstraint(
            ["client_id"], ["clients.id"], name="fk_workflows_client_id_clients"
        ),
        sa.UniqueConstraint(
            "client_id", "idempotency_key", name="uq_workflows_client_id_idempotency_key"
        ),
        sa.CheckConstraint(
            in_list("on_failure", ON_FAILURE_0009), name="ck_workflows_on_failure_known"
        ),
        sa.CheckConstraint(
            "char_length(idempotency_key) BETWEEN 1 AND 200",
            name="ck_workflows_idempotency_key_length",
        ),
    )
    op.add_column("jobs", sa.Column("workflow_id", sa.Uuid(), nullable=True))
    op.add_column("jobs", sa.Column("workflow_ref", sa.Text(), nullable=True))
    op.add_column(
        "jobs",
        sa.Column("waiting_for", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("jobs", sa.Column("progress", sa.dialects.postgresql.JSONB(), nullable=True))
    op.create_foreign_key(
        "fk_jobs_workflow_id_workflows", "jobs", "workflows", ["workflow_id"], ["id"]
    )
    for name, condition in {
        "ck_jobs_waiting_iff_parents_pending": "(state = 'waiting') = (waiting_for > 0)",
        "ck_jobs_workflow_ref_whole": "(workflow_id IS NULL) = (workflow_ref IS NULL)",
    }.items():
        op.execute(f"ALTER TABLE jobs ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
        op.execute(f"ALTER TABLE jobs VALIDATE CONSTRAINT {name}")
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("parent_id", sa.Uuid(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "parent_id", name="pk_job_dependencies"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_dependencies_job_id_jobs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["jobs.id"],
            name="fk_job_dependencies_parent_id_jobs",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("job_id <> parent_id", name="ck_job_dependencies_not_itself"),
    )
    op.create_index("ix_job_dependencies_parent_id", "job_dependencies", ["parent_id"])
    op.create_index(
        "ix_jobs_workflow_id",
        "jobs",
        ["workflow_id"],
        postgresql_where=sa.text("workflow_id IS NOT NULL"),
    )
    _swap_check("jobs", STATE_CHECK, in_list("state", STATES_0009))
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0009))
    _rebuild_live_indexes(LIVE_STATES_0009)


def downgrade() -> None:
    _rebuild_live_indexes(LIVE_STATES_0003)
    # Jobs that wait for a parent cannot be represented before this revision: cancelled.
    op.execute(
        "UPDATE jobs SET state = 'cancelled', finished_at = now(), waiting_for = 0 "
        "WHERE state = 'waiting'"
    )
    op.execute("DELETE FROM job_events WHERE event IN ('parents_succeeded', 'restored')")
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0007))
    _swap_check("jobs", STATE_CHECK, in_list("state", STATES_0001))
    op.drop_index("ix_jobs_workflow_id", table_name="jobs")
    op.drop_table("job_dependencies")
    for name in ("ck_jobs_waiting_iff_parents_pending", "ck_jobs_workflow_ref_whole"):
        op.execute(f"ALTER TABLE jobs DROP CONSTRAINT {name}")
    op.drop_constraint("fk_jobs_workflow_id_workflows", "jobs", type_="foreignkey")
    for column in ("progress", "waiting_for", "workflow_ref", "workflow_id"):
        op.drop_column("jobs", column)
    op.drop_table("workflows")
