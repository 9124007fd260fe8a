"""Throwaway PostgreSQL + RabbitMQ servers under one project-local directory.

``scripts/servers.py`` is the entry point and documents the commands; this package holds the
code, by server: ``common`` (layout, state file, ports, processes), ``postgres``, ``rabbitmq``
(one node or a cluster of several, and their fault helpers), ``lifecycle`` (both together, the
exported environment) and ``cli``. Stdlib only.
"""

# The importable API (explicit re-exports): what scripts/servers.py offers when loaded by path.
from .cli import main as main
from .common import ServerError as ServerError
from .lifecycle import down as down, read_env as read_env, status as status, up as up
from .postgres import pg_restart as pg_restart, pg_start as pg_start, pg_stop as pg_stop
from .rabbitmq import (
    rabbit_heal_partition as rabbit_heal_partition,
    rabbit_kill as rabbit_kill,
    rabbit_nodes as rabbit_nodes,
    rabbit_partition as rabbit_partition,
    rabbit_pause as rabbit_pause,
    rabbit_restart_app as rabbit_restart_app,
    rabbit_resume as rabbit_resume,
    rabbit_start as rabbit_start,
    rabbit_start_app as rabbit_start_app,
    rabbit_stop_app as rabbit_stop_app,
    rabbitmqctl as rabbitmqctl,
)
