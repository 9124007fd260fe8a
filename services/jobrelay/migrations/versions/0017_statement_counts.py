"""Finished-job counts written once per statement, not once per job.

Until now three row triggers on ``jobs`` (0003) appended one ``job_count_deltas`` row per job
entering or leaving a finished state, which the dispatcher deletes when it folds them into
``job_totals``: two row writes for every plain job. Here they become statement triggers with
transition tables: a statement adds, per (state, code) whose count it changed, the net of its rows
(a group commit of a hundred successes writes one row, not a hundred): to the bucket's total in
place when no other transaction is adding to it, else as a delta row, folded later.

PostgreSQL 15 allows neither a column list nor WHEN on a trigger with transition tables, so the
function filters: it counts, under their old bucket -1 and under their new one +1, the rows in a
finished state, and keeps the buckets whose net is not 0 (what the row triggers counted, summed;
a row whose state and code did not change nets to 0 there). A statement with several data
modifying CTEs on ``jobs`` (``FINISH_JOBS`` and the fragment ``dependents_of``) fires each
trigger once, its transition tables holding the rows of all of them (PostgreSQL 10 merged them;
tests/integration/test_job_counts.py holds it). Every UPDATE of ``jobs`` now fills the transition
tables and calls the function once, claims and renewals included: a statement's cost, not a
row's (the report of issue 40 measures it).

The triggers are swapped in one transaction: a write to ``jobs`` waits for its commit, so no
finish is counted twice or missed.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

import importlib

from alembic import op

from jobrelay.db.history import TERMINAL_STATES_0001

revision = "0017"
down_revision = "0016"  # no branch labels, no dependencies

EVENTS = ("INSERT", "UPDATE", "DELETE")
_FINISHED = "state IN ({})".format(", ".join(repr(state) for state in TERMINAL_STATES_0001))

# The transition tables are named per trigger (an INSERT has no old rows, a DELETE no new
# ones); PL/pgSQL plans a branch's statement only when it runs, so one function serves all three.
# Each branch says its ``moves``, (state, code, n) per bucket, then ADD_MOVES adds them.
COUNT_FINISHED = f"""
CREATE OR REPLACE FUNCTION jobrelay_count_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        WITH moves AS (
            SELECT state, coalesce(last_error_code, '') AS code, count(*) AS n FROM new_jobs
            WHERE {_FINISHED} GROUP BY 1, 2
        ){{add_moves}}
    ELSIF TG_OP = 'DELETE' THEN
        WITH moves AS (
            SELECT state, coalesce(last_error_code, '') AS code, -count(*) AS n FROM old_jobs
            WHERE {_FINISHED} GROUP BY 1, 2
        ){{add_moves}}
    ELSE
        WITH moves AS (
            SELECT state, code, sum(n) AS n FROM (
                SELECT state, coalesce(last_error_code, '') AS code, -1 AS n FROM old_jobs
                WHERE {_FINISHED}
                UNION ALL
                SELECT state, coalesce(last_error_code, ''), 1 FROM new_jobs
                WHERE {_FINISHED}
            ) AS each_row
            GROUP BY 1, 2 HAVING sum(n) <> 0
        ){{add_moves}}
    END IF;
    RETURN NULL;
END
$$
"""

# A bucket's total is added to in place when no other transaction is adding to it (its row
# taken with SKIP LOCKED: a finish never waits for another): one row written per statement and
# bucket, and nothing left to fold. A bucket another transaction holds, or one with no total
# yet, gets a delta row as before, which the dispatcher folds (FOLD_JOB_COUNTS waits for the
# holder's commit, never the other way round).
ADD_MOVES = """, free AS (
            SELECT t.state, t.code FROM job_totals t
            JOIN moves m ON m.state = t.state AND m.code = t.code
            ORDER BY t.state, t.code
            FOR UPDATE OF t SKIP LOCKED
        ), added AS (
            UPDATE job_totals t SET n = t.n + m.n
            FROM moves m JOIN free f ON f.state = m.state AND f.code = m.code
            WHERE t.state = m.state AND t.code = m.code
            RETURNING t.state, t.code
        )
        INSERT INTO job_count_deltas (state, code, n)
        SELECT m.state, m.code, m.n FROM moves m
        WHERE NOT EXISTS (SELECT 1 FROM added a WHERE a.state = m.state AND a.code = m.code);"""

COUNT_FINISHED = COUNT_FINISHED.replace("{add_moves}", ADD_MOVES)

REFERENCING = {
    "INSERT": "NEW TABLE AS new_jobs",
    "UPDATE": "OLD TABLE AS old_jobs NEW TABLE AS new_jobs",
    "DELETE": "OLD TABLE AS old_jobs",
}

# CREATE OR REPLACE drops the function's settings: pinned again to jobrelay's schema, as 0012
# pins every function (in SQL, so offline output has it too).
PIN = """
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION jobrelay_count_finished() '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$
"""


def _drop_triggers() -> None:
    for event in EVENTS:
        op.execute(f"DROP TRIGGER jobs_count_finished_{event.lower()} ON jobs")


def upgrade() -> None:
    _drop_triggers()
    op.execute(COUNT_FINISHED)
    op.execute(PIN)
    for event in EVENTS:
        op.execute(
            f"CREATE TRIGGER jobs_count_finished_{event.lower()} AFTER {event} ON jobs "
            f"REFERENCING {REFERENCING[event]} "
            "FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_count_finished()"
        )


def downgrade() -> None:
    flat_storage = importlib.import_module("jobrelay.migrations.versions.0003_flat_storage")
    _drop_triggers()
    op.execute(flat_storage.COUNT_FINISHED.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.execute(PIN)
    for event, condition in flat_storage.TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER jobs_count_finished_{event.lower()} AFTER {event} ON jobs "
            f"FOR EACH ROW {condition} EXECUTE FUNCTION jobrelay_count_finished()"
        )
