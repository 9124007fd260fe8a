"""Durable execution (docs/durable-execution.md): steps, sleeps, signals and children in a job.

- A new state, ``sleeping`` (live: the live partial indexes are rebuilt with it, so a sleeper's
  unique key stays unique), and three journal events: ``sleeping``, ``signalled``, ``woke``.
- ``jobs.wake_at`` (when a sleeper is due again; NULL while it waits for a signal or a child
  with no deadline), ``jobs.waiting_on`` (``{"signal": name}`` or ``{"child": id}``; NULL for a
  plain sleep) and ``jobs.parent_job_id`` (the job that submitted it with ``context.run_child``
  or ``start_child``; its end wakes that parent). ``sleeping_has_a_wake``: a sleeper has a wake
  time or waits for something, and no other state has either.
- ``job_steps``: what a job recorded, by name, under which attempt; they go with the job.
- ``job_signals``: the signals sent to a job, each taken by at most one wait (``taken_by``:
  the step's name), idempotent by (job, key) when sent with a key.
- ``jobrelay_signal(job_id, name, value[, idempotency_key])``: sends a signal in the caller's
  transaction. It takes the job's row first, so a handler's wait that holds that row at the same
  instant either sees the signal or is woken by it.

New columns are nullable: nothing is rewritten; the checks are added NOT VALID, then validated.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

import importlib

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from jobrelay.db.history import (
    EVENTS_0009,
    EVENTS_0016,
    LIVE_STATES_0009,
    LIVE_STATES_0016,
    STATES_0009,
    STATES_0016,
    STEP_KINDS_0016,
    STEP_STATUSES_0016,
    in_list,
)

revision = "0016"
down_revision = "0015"  # no branch labels, no dependencies

STATE_CHECK = "ck_jobs_ck_jobs_state_known"
EVENT_CHECK = "ck_job_events_ck_job_events_event_known"

# The signal's sender takes the job's row before it looks at anything (FOR NO KEY UPDATE), as the
# handler's wait does (db/sql/durable.sql, lock_for_wait), and each statement of a function
# sees what committed before it started: of a wait and a signal at the same instant, the second
# sees the first. Answers: 'sent', 'repeated' (its key was used for this job), 'finished' (the
# job ended: nothing kept), 'unknown' (no such job).
SIGNAL_FUNCTION = """
CREATE OR REPLACE FUNCTION jobrelay_signal(
    job_id uuid, name text, value jsonb, idempotency_key text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    found_state text;
    found_waiting_on jsonb;
    found_attempts int;
    kept bigint;
BEGIN
    IF name IS NULL OR char_length(name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a signal''s name is a text of 1 to 200 characters'
            USING ERRCODE = '22023';
    END IF;
    SELECT j.state, j.waiting_on, j.attempts INTO found_state, found_waiting_on, found_attempts
    FROM jobs j WHERE j.id = job_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF found_state IN ('succeeded', 'quarantined', 'cancelled') THEN
        RETURN 'finished';
    END IF;
    INSERT INTO job_signals (job_id, name, value, idempotency_key)
    VALUES (job_id, name, coalesce(value, 'null'::jsonb), idempotency_key)
    ON CONFLICT ON CONSTRAINT uq_job_signals_job_id_idempotency_key DO NOTHING
    RETURNING id INTO kept;
    IF kept IS NULL THEN
        RETURN 'repeated';
    END IF;
    INSERT INTO job_events (job_id, event, attempt, detail)
    VALUES (job_id, 'signalled', found_attempts, 'signal ' || name);
    IF found_state = 'sleeping' AND found_waiting_on = jsonb_build_object('signal', name) THEN
        -- makes: wake
        UPDATE jobs j SET state = 'queued', wake_at = NULL, waiting_on = NULL,
                          available_at = now(), updated_at = now()
        WHERE j.id = job_id AND j.state IN ('sleeping');
        INSERT INTO outbox (job_id, available_at, priority, client_id, type)
        SELECT j.id, j.available_at, j.priority, j.client_id, j.type FROM jobs j
        WHERE j.id = job_id;
        INSERT INTO job_events (job_id, event, attempt, detail)
        VALUES (job_id, 'woke', found_attempts, 'signal ' || name || ' arrived');
    END IF;
    RETURN 'sent';
END
$$
"""


def _swap_check(table: str, name: str, condition: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def _rebuild_live_indexes(live: tuple[str, ...]) -> None:
    """0009's rebuild of the live partial indexes, with ``live`` as the live states."""
    revision_0009 = importlib.import_module("jobrelay.migrations.versions.0009_workflows")
    revision_0009._rebuild_live_indexes(live)


def _pinned() -> str:
    """0012's pin (``pg_catalog, <schema>, pg_temp``), so no temporary table shadows jobrelay's."""
    revision_0012 = importlib.import_module("jobrelay.migrations.versions.0012_own_schema")
    action = "SET search_path = pg_catalog, %2$I, pg_temp"
    return str(revision_0012._each_function(("jobrelay_signal",), action))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("wake_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("waiting_on", postgresql.JSONB(), nullable=True))
    op.add_column("jobs", sa.Column("parent_job_id", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        "fk_jobs_parent_job_id_jobs", "jobs", "jobs", ["parent_job_id"], ["id"], ondelete="SET NULL"
    )
    op.create_index(
        "ix_jobs_parent_job_id",
        "jobs",
        ["parent_job_id"],
        postgresql_where=sa.text("parent_job_id IS NOT NULL"),
    )
    op.execute(
        "ALTER TABLE jobs ADD CONSTRAINT ck_jobs_sleeping_has_a_wake CHECK "
        "((state = 'sleeping') = (wake_at IS NOT NULL OR waiting_on IS NOT NULL)) NOT VALID"
    )
    op.execute("ALTER TABLE jobs VALIDATE CONSTRAINT ck_jobs_sleeping_has_a_wake")
    op.create_table(
        "job_steps",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, server_default=sa.text("'done'")),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("value", postgresql.JSONB(), nullable=True),
        sa.Column("wake_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("child_id", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "name", name="pk_job_steps"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_steps_job_id_jobs", ondelete="CASCADE"
        ),
        sa.CheckConstraint(in_list("kind", STEP_KINDS_0016), name="ck_job_steps_kind_known"),
        sa.CheckConstraint(in_list("status", STEP_STATUSES_0016), name="ck_job_steps_status_known"),
        sa.CheckConstraint("char_length(name) BETWEEN 1 AND 200", name="ck_job_steps_name_length"),
    )
    op.create_table(
        "job_signals",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column(
            "sent_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("taken_by", sa.Text(), nullable=True),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_signals"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_signals_job_id_jobs", ondelete="CASCADE"
        ),
        sa.UniqueConstraint(
            "job_id", "idempotency_key", name="uq_job_signals_job_id_idempotency_key"
        ),
        sa.CheckConstraint(
            "char_length(name) BETWEEN 1 AND 200", name="ck_job_signals_name_length"
        ),
        sa.CheckConstraint(
            "(taken_by IS NULL) = (taken_at IS NULL)", name="ck_job_signals_taken_whole"
        ),
    )
    op.create_index(
        "ix_job_signals_untaken",
        "job_signals",
        ["job_id", "name", "id"],
        postgresql_where=sa.text("taken_by IS NULL"),
    )
    _swap_check("jobs", STATE_CHECK, in_list("state", STATES_0016))
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0016))
    _rebuild_live_indexes(LIVE_STATES_0016)
    op.execute(SIGNAL_FUNCTION)
    op.execute(_pinned())


def downgrade() -> None:
    op.execute("DROP FUNCTION jobrelay_signal(uuid, text, jsonb, text)")
    _rebuild_live_indexes(LIVE_STATES_0009)
    # A sleeper cannot be represented before this revision: queued, due now, with an outbox row
    # (its handler runs again from the top).
    op.execute(
        "INSERT INTO outbox (job_id, available_at, priority, client_id, type) "
        "SELECT id, now(), priority, client_id, type FROM jobs WHERE state = 'sleeping'"
    )
    op.execute(
        "UPDATE jobs SET state = 'queued', available_at = now(), wake_at = NULL, "
        "waiting_on = NULL WHERE state = 'sleeping'"
    )
    op.execute("DELETE FROM job_events WHERE event IN ('sleeping', 'signalled', 'woke')")
    _swap_check("job_events", EVENT_CHECK, in_list("event", EVENTS_0009))
    _swap_check("jobs", STATE_CHECK, in_list("state", STATES_0009))
    op.drop_table("job_signals")
    op.drop_table("job_steps")
    op.execute("ALTER TABLE jobs DROP CONSTRAINT ck_jobs_sleeping_has_a_wake")
    op.drop_index("ix_jobs_parent_job_id", table_name="jobs")
    op.drop_constraint("fk_jobs_parent_job_id_jobs", "jobs", type_="foreignkey")
    for column in ("parent_job_id", "waiting_on", "wake_at"):
        op.drop_column("jobs", column)
