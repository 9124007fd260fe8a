"""jobrelay's own schema: every function finds jobrelay's tables, whatever the caller's path.

From this revision on, the migrations run with jobrelay's schema first on the search_path
(migrations/env.py) and the version table in it; `jobrelay migrate` first moves an install
made before it out of ``public`` (db/migrations.py). Here every jobrelay function gets its
search_path pinned to that schema (``pg_catalog, <schema>, pg_temp``, as 0010 pinned the
enqueue functions to the schema they were made in):

- the trigger functions (``jobrelay_notify_outbox``, ``jobrelay_count_finished``,
  ``jobrelay_notify_finished``) had none: they run with the path of the statement that fires
  them, an application's own (``public``, perhaps with its own ``jobs`` table) when it calls
  ``jobrelay.jobrelay_enqueue``;
- the enqueue functions of 0010/0011 were pinned to the schema they were created in, which is
  ``public`` on an install that was just moved.

The pin is written in SQL from ``current_schema()`` (not from the schema read in Python), so
offline (``--sql``) output has it too. Nothing is locked beyond the catalog rows.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from alembic import op

from jobrelay.db.history import FUNCTIONS_0011, TRIGGER_FUNCTIONS_0011

revision = "0012"
down_revision = "0011"  # no branch labels, no dependencies


def _each_function(names: tuple[str, ...], action: str) -> str:
    """A DO block running ``ALTER FUNCTION <signature> <action>`` on every function of the
    current schema named in ``names`` (``%1$I``: the schema, for the action's format)."""
    listed = ", ".join(f"'{name}'" for name in names)
    return f"""
DO $$
DECLARE
    signature regprocedure;
BEGIN
    FOR signature IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname IN ({listed})
    LOOP
        EXECUTE format('ALTER FUNCTION %s {action}', signature, current_schema());
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.execute(_each_function(FUNCTIONS_0011, "SET search_path = pg_catalog, %2$I, pg_temp"))


def downgrade() -> None:
    # The enqueue functions keep their pin: 0010 pins them to the schema they are in.
    op.execute(_each_function(TRIGGER_FUNCTIONS_0011, "RESET search_path"))
