-- The statements a listening connection (db/listener.py) and the pool-mode probe (db/pooler.py)
-- run on psycopg itself.
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: listener_ping
-- The dispatcher's listening connection pings after a quiet period, to notice a half-open
-- connection, and a server that went into recovery under it (a demoted primary hears no
-- NOTIFY: they are sent on the new primary), so the listener reconnects, to the primary.
SELECT pg_is_in_recovery() AS in_recovery;

-- name: server_pid
-- The pool-mode probe at start (db/pooler.py): the pid of the server session that runs it,
-- compared with the one the connection was told at login.
SELECT pg_backend_pid() AS pid;
