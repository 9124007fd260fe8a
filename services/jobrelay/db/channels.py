"""The NOTIFY channels jobrelay's statements and triggers notify, and the LISTEN commands of
the connections that hear them (db/listener.py). The statements name each channel literally in
their ``pg_notify`` (db/sql/*.sql); tests/unit/test_sql_statements.py holds the two together."""

from __future__ import annotations

# The API's caches of token lookups listen on this channel: every statement that changes which
# token opens which client notifies it (db/sql/clients.sql), so a disabled client or a rotated
# token is refused at once by every API process.
CLIENTS_CHANNEL = "jobrelay_clients"
# A job entered a finished state (trigger jobs_notify_finished, migration 0005); the payload is
# its id. ``GET /v1/jobs/{id}?wait=`` answers on it.
FINISHED_CHANNEL = "jobrelay_jobs_finished"

# A statement trigger on the outbox (migration 0001) notifies this channel on every insert, and
# a resumed queue (resume_queue) too. The dispatcher's listening connection LISTENs once per
# connection.
OUTBOX_CHANNEL = "jobrelay_outbox"
LISTEN_OUTBOX = f"LISTEN {OUTBOX_CHANNEL}"

# A consumer registered types: every API process reloads its catalog (core/type_catalog.py).
TYPES_CHANNEL = "jobrelay_job_types"

# The API's listening connection (api/notifications.py): the clients, the finished jobs and the
# registered types.
LISTEN_API = f"LISTEN {CLIENTS_CHANNEL}; LISTEN {FINISHED_CHANNEL}; LISTEN {TYPES_CHANNEL}"
