"""The lean journal (docs/life-of-a-job.md, "The journal"): a plain job's story is told by its
own rows, not by journal rows written for it.

A job's received, published, claimed and succeeded entries were four ``job_events`` rows on
every job's hot path. They are now read from columns the hot path writes anyway:

- received: ``jobs.created_at`` (the accept writes no entry);
- published: the outbox row its mark already updates, which now keeps the entry's place in the
  journal (``journal_id``, drawn when the row was leased, as before), its time
  (``leased_at``) and the attempt its message delivers (``delivers_attempt``);
- claimed: ``jobs.claimed_seq``, ``claimed_at``, ``claimed_by``, the current attempt's claim,
  written by the claim's own update. The claim that replaces one (a retry, a re-claim, a
  wake, a replay) first journals the one it replaces, from the row, in its own statement;
- succeeded: ``jobs.finished_seq`` (with ``finished_at`` and ``attempts``), written by the
  finish's own update.

``job_journal`` is the journal as it reads: ``job_events`` and those entries, each with its
``seq`` (its place: a journal id; 0 for received, which comes first), one view readable in
psql. An entry journaled from a row later keeps its place in ``job_events.seq`` (its own id
is new: a place drawn by a lease whose commit a crash lost may be drawn again, and must never
make an insert fail). Everything else a job lives through (retries, failures, redeliveries, holds,
quarantines, replays, steps, signals) is still a ``job_events`` row.

Jobs written before this revision keep their entries in ``job_events``: their new columns are
NULL, so the view tells nothing twice; only their ``received`` rows are read from
``created_at`` instead (the view skips ``received`` rows, which said nothing more). Services of
the previous revision may run beside this one during an upgrade: what they write reads the
same. ``jobrelay_enqueue`` (0010) no longer writes a ``received`` row.

New columns are nullable: nothing is rewritten.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"  # no branch labels, no dependencies

_ENQUEUE_0010 = importlib.import_module("jobrelay.migrations.versions.0010_enqueue_function")
_RECEIVED_ROW = """, new_event AS (
            INSERT INTO job_events (job_id, event, attempt) SELECT id, 'received', 0 FROM j
        )"""
ENQUEUE_SIGNATURE = "jobrelay_enqueue(text, text, jsonb, text, timestamptz, int)"

# The journal as it reads. Each branch is filtered on the job, so a query of one job's journal
# (``WHERE job_id = ...``) reads one index entry of jobs, of outbox and of job_events each.
JOURNAL_VIEW = """
CREATE VIEW job_journal AS
SELECT e.job_id, coalesce(e.seq, e.id) AS seq, e.at, e.event, e.attempt, e.detail, e.error
FROM job_events e
WHERE e.event <> 'received'
UNION ALL
SELECT j.id, told.seq, told.at, told.event, told.attempt, told.detail, NULL::jsonb
FROM jobs j
CROSS JOIN LATERAL (
    VALUES (0::bigint, j.created_at, 'received'::text, 0, NULL::text),
           (j.claimed_seq, j.claimed_at, 'claimed', j.attempts, j.claimed_by),
           (j.finished_seq, j.finished_at, 'succeeded', j.attempts, NULL)
) AS told(seq, at, event, attempt, detail)
WHERE told.seq IS NOT NULL
UNION ALL
SELECT o.job_id, o.journal_id, o.leased_at, 'published', o.delivers_attempt,
       'outbox ' || o.id, NULL::jsonb
FROM outbox o
WHERE o.journal_id IS NOT NULL
"""

JOURNAL_COMMENT = (
    "COMMENT ON VIEW job_journal IS 'What happened to each job, in order of seq: job_events, "
    "and the received, published, claimed and succeeded entries its rows tell "
    "(docs/life-of-a-job.md, The journal)'"
)


def _enqueue_without_received_row() -> str:
    definition = str(_ENQUEUE_0010.ENQUEUE)
    assert _RECEIVED_ROW in definition, "0010's jobrelay_enqueue changed: update this revision"
    return definition.replace(_RECEIVED_ROW, "")


def _pinned_enqueue() -> str:
    """0012's pin (``CREATE OR REPLACE`` drops a function's settings)."""
    revision_0012 = importlib.import_module("jobrelay.migrations.versions.0012_own_schema")
    action = "SET search_path = pg_catalog, %2$I, pg_temp"
    return str(revision_0012._each_function(("jobrelay_enqueue",), action))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("claimed_seq", sa.BigInteger(), nullable=True))
    op.add_column("jobs", sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("claimed_by", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("finished_seq", sa.BigInteger(), nullable=True))
    op.add_column("job_events", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("outbox", sa.Column("journal_id", sa.BigInteger(), nullable=True))
    op.add_column("outbox", sa.Column("leased_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("outbox", sa.Column("delivers_attempt", sa.Integer(), nullable=True))
    op.execute(JOURNAL_VIEW)
    op.execute(JOURNAL_COMMENT)
    op.execute(_enqueue_without_received_row())
    op.execute(_pinned_enqueue())
    op.execute(_ENQUEUE_0010.ENQUEUE_COMMENT)


def downgrade() -> None:
    # Back to rows: every entry the view told from columns becomes the job_events row the
    # previous revision wrote, with its place as id where that id is free; a received entry (a
    # job that has none) takes a negative one, so that it reads first, as it was. A row that
    # kept its place in seq takes it as its id where free.
    op.execute(
        "UPDATE job_events e SET id = e.seq WHERE e.seq IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM job_events x WHERE x.id = e.seq)"
    )
    op.execute(
        "INSERT INTO job_events (id, job_id, event, attempt, detail, error, at) "
        "SELECT CASE WHEN seq = 0 OR EXISTS (SELECT 1 FROM job_events x WHERE x.id = v.seq) "
        "THEN -nextval('job_events_id_seq') ELSE seq END, "
        "job_id, event, attempt, detail, error, at FROM job_journal v "
        "WHERE event IN ('received', 'published', 'claimed', 'succeeded') "
        "AND NOT EXISTS (SELECT 1 FROM job_events e WHERE coalesce(e.seq, e.id) = v.seq "
        "AND e.job_id = v.job_id AND e.event = v.event) "
        "AND NOT (event = 'received' AND EXISTS (SELECT 1 FROM job_events e "
        "WHERE e.job_id = v.job_id AND e.event = 'received')) "
        "ORDER BY seq"
    )
    op.execute("DROP VIEW job_journal")
    op.drop_column("job_events", "seq")
    op.execute(_ENQUEUE_0010.ENQUEUE)
    op.execute(_pinned_enqueue())
    op.execute(_ENQUEUE_0010.ENQUEUE_COMMENT)
    for column in ("delivers_attempt", "leased_at", "journal_id"):
        op.drop_column("outbox", column)
    for column in ("finished_seq", "claimed_by", "claimed_at", "claimed_seq"):
        op.drop_column("jobs", column)
