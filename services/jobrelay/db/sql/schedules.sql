-- The scheduler's reads (db/schedule_store.py; jobrelay/dispatcher/scheduler.py).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: scheduler_client_id
-- The built-in client that owns the jobs of schedules (migration 0005), by name.
SELECT id FROM jobrelay.clients WHERE name = :name;

-- name: database_now
-- The database's clock: every dispatcher reads the ticks of schedules on the same one.
SELECT clock_timestamp() AS now;
