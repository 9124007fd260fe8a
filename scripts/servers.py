#!/usr/bin/env python3
"""Throwaway PostgreSQL + RabbitMQ servers for jobrelay development, tests and CI.

Both servers live entirely in a project-local directory, listen on 127.0.0.1 only
and use free ports, so they never collide with system services. Stdlib only.

Usage:
    scripts/servers.py up                  start both (idempotent), print `export` lines;
                                           data kept by an earlier `down` is used again
    scripts/servers.py down                stop both, keeping their data for the next `up`
    scripts/servers.py down --delete-data  stop both and delete their data (says what)
    scripts/servers.py status              show what is running (exit 1 if not all up)
    scripts/servers.py env                 print the `export` lines of the running servers
    scripts/servers.py run [--keep] -- CMD ARGS...
                                           up, run CMD with the env merged in, down,
                                           exit with CMD's exit code (throwaway: servers
                                           it created are deleted after; servers that were
                                           already running are left running, and data an
                                           earlier `down` kept is kept)
  fault helpers (for tests):
    scripts/servers.py pg-stop             immediate (crash-like) PostgreSQL stop
    scripts/servers.py pg-start            start PostgreSQL again and wait until ready
    scripts/servers.py pg-restart          pg-stop + pg-start
    scripts/servers.py rabbitmqctl ARGS... rabbitmqctl against our node, e.g.
                                           `rabbitmqctl close_all_connections test`
    scripts/servers.py rabbit-restart-app  rabbitmqctl stop_app + start_app, wait until ready

    eval "$(scripts/servers.py up)"        # typical shell use

Environment:
    JOBRELAY_SERVERS_DIR          base directory (default: <repo>/.local/servers)
    JOBRELAY_PG_PORT, JOBRELAY_AMQP_PORT, JOBRELAY_RABBITMQ_MGMT_PORT,
    JOBRELAY_RABBITMQ_DIST_PORT   fixed ports (default: free ports picked at `up`)
    JOBRELAY_PG_BINDIR            PostgreSQL bin dir (default: newest /usr/lib/postgresql/*/bin)
    ERL_EPMD_PORT                 epmd port for our RabbitMQ node (default 4369, shared with
                                  other Erlang nodes; an epmd we started is stopped by `down`
                                  once no node is registered in it)

Exported by `up` / `env` (also written to <base>/env):
    JOBRELAY_DATABASE_URL, JOBRELAY_AMQP_URL, JOBRELAY_RABBITMQ_API_URL,
    JOBRELAY_SERVERS_DIR, JOBRELAY_RABBITMQ_NODE

Importable (load by path with importlib): up(), down(delete_data=...), status(), read_env(),
pg_stop(), pg_start(), pg_restart(), rabbitmqctl(*args), rabbit_restart_app().
They raise ServerError on expected failures. The code is in scripts/localservers/.
"""

import sys
from pathlib import Path

# Run as a script, Python puts scripts/ on sys.path; loaded by path with importlib
# (tests/support/faults.py) it does not, and the package beside this file must still import.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from localservers import (  # noqa: E402
    ServerError,
    down,
    main,
    pg_restart,
    pg_start,
    pg_stop,
    rabbit_restart_app,
    rabbitmqctl,
    read_env,
    status,
    up,
)

__all__ = [
    "ServerError",
    "down",
    "main",
    "pg_restart",
    "pg_start",
    "pg_stop",
    "rabbit_restart_app",
    "rabbitmqctl",
    "read_env",
    "status",
    "up",
]

if __name__ == "__main__":
    sys.exit(main())
