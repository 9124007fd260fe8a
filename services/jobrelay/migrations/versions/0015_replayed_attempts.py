"""A replay gives a job a fresh run (docs/states.md, "Attempts and replays"); workflows listed.

- ``jobs.replayed_attempts``: the attempts the job used before its latest replay (0 if never
  replayed). ``attempts`` still counts every claim of the job's life, so attempt numbers stay
  unique per job (the journal, the handler's ``context.attempt``); the run's attempt
  (``attempts - replayed_attempts``) is what the backoff counts from and what the views show
  against the run's budget (``max_attempts - replayed_attempts``).
  ``replayed_attempts_in_bounds`` keeps it between 0 and ``attempts``.
- Jobs replayed before this migration take it from their latest ``replayed`` journal entry
  (its attempt is the job's attempts at the replay).
- ``ix_workflows_created_at_id``: the workflow listings, newest first (``jobrelay workflows
  list``, the console's Workflows page).

Adding a column with a constant default rewrites nothing; the backfill reads the journal's
``replayed`` entries once.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"  # no branch labels, no dependencies


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("replayed_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.execute("""
UPDATE jobs j SET replayed_attempts = latest.attempt
FROM (SELECT DISTINCT ON (job_id) job_id, attempt FROM job_events
      WHERE event = 'replayed' ORDER BY job_id, id DESC) AS latest
WHERE j.id = latest.job_id AND latest.attempt BETWEEN 0 AND j.attempts
""")
    op.create_check_constraint(
        "ck_jobs_replayed_attempts_in_bounds",
        "jobs",
        "replayed_attempts >= 0 AND replayed_attempts <= attempts",
    )
    op.create_index("ix_workflows_created_at_id", "workflows", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_workflows_created_at_id", table_name="workflows")
    op.drop_constraint("ck_jobs_replayed_attempts_in_bounds", "jobs", type_="check")
    op.drop_column("jobs", "replayed_attempts")
