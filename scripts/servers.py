#!/usr/bin/env python3
"""Throwaway PostgreSQL + RabbitMQ servers for jobrelay development, tests and CI.

Both servers live entirely in a project-local directory, listen on 127.0.0.1 only
and use free ports, so they never collide with system services. Stdlib only.

Usage:
    scripts/servers.py up [--rabbitmq-nodes N] [--rabbitmq-netns]
                                           start both (idempotent), print `export` lines;
                                           data kept by an earlier `down` is used again.
                                           With N > 1 (or JOBRELAY_RABBITMQ_NODES=N),
                                           RabbitMQ is a cluster of N nodes (see below)
    scripts/servers.py down                stop both, keeping their data for the next `up`
    scripts/servers.py down --delete-data  stop both and delete their data (says what)
    scripts/servers.py status              show what is running (exit 1 if not all up)
    scripts/servers.py env                 print the `export` lines of the running servers
    scripts/servers.py run [--keep] [--rabbitmq-nodes N] [--rabbitmq-netns] -- CMD ARGS...
                                           up, run CMD with the env merged in, down,
                                           exit with CMD's exit code (throwaway: servers
                                           it created are deleted after; servers that were
                                           already running are left running, and data an
                                           earlier `down` kept is kept)
    scripts/servers.py run --postgres-ha[-async] -- CMD ARGS...
                                           the same, and PostgreSQL under Patroni for CMD:
                                           etcd and two nodes (a primary and a synchronous
                                           standby, or an asynchronous one), a new cluster in
                                           <base>/patroni/<scope>, deleted after CMD (see
                                           scripts/localservers/patroni.py); CMD gets
                                           JOBRELAY_DATABASE_URL as the nodes' multi-host URL
                                           (target_session_attrs=read-write) and
                                           JOBRELAY_PATRONI_CLUSTER (a JSON file: each node's
                                           ports, data dir and patronictl config)
    scripts/servers.py run --pgbouncer -- CMD ARGS...
                                           the same, and a PgBouncer (pool_mode=transaction,
                                           free loopback port) in front of PostgreSQL for CMD
                                           (scripts/localservers/pgbouncer.py): CMD gets
                                           JOBRELAY_DATABASE_URL through it,
                                           JOBRELAY_DATABASE_POOL_MODE=transaction and
                                           JOBRELAY_DIRECT_DATABASE_URL (PostgreSQL itself)
  fault helpers (for tests):
    scripts/servers.py pg-stop             immediate (crash-like) PostgreSQL stop
    scripts/servers.py pg-start            start PostgreSQL again and wait until ready
    scripts/servers.py pg-restart          pg-stop + pg-start
    scripts/servers.py rabbitmqctl [--node N] ARGS...
                                           rabbitmqctl against our node (node N of a
                                           cluster, default 1), e.g.
                                           `rabbitmqctl close_all_connections test`
    scripts/servers.py rabbit-restart-app [N]
                                           rabbitmqctl stop_app + start_app, wait until ready
  fault helpers on RabbitMQ node N (1 to the number of nodes; 1 is the single node):
    scripts/servers.py rabbit-stop-app N   rabbitmqctl stop_app: the node closes its
                                           clients' connections and stops serving
    scripts/servers.py rabbit-start-app N  rabbitmqctl start_app, wait until it serves
    scripts/servers.py rabbit-kill N       SIGKILL the node's beam.smp (a crash)
    scripts/servers.py rabbit-start N      start a killed node from its data, wait until it
                                           serves (a cluster node rejoins by itself)
    scripts/servers.py rabbit-pause N      SIGSTOP the node's beam.smp and the processes under
                                           it (erl_child_setup, ...): sockets stay open, nothing
                                           answers; epmd (shared) is left alone
    scripts/servers.py rabbit-resume N     SIGCONT the node's processes, wait until it serves
                                           (in a cluster: restart its app if it was frozen
                                           long enough to come back partitioned, and wait
                                           until the cluster is whole)

    eval "$(scripts/servers.py up)"        # typical shell use

A cluster in network namespaces (`up --rabbitmq-nodes 3 --rabbitmq-netns`, or
JOBRELAY_RABBITMQ_NETNS=1; root): node N runs in namespace jr-rmqN as rabbit@10.203.0.1N (long
names), on a veth into the bridge jrbr0 (10.203.0.1, root namespace), with its own epmd and
cluster_partition_handling = pause_minority; `down` removes the namespaces and the bridge, and
`up` removes a killed run's leftovers first (scripts/localservers/netns.py). rabbit_partition
({n: [senders]}) makes node n drop what the senders send (nftables in its namespace);
rabbit_heal_partition() removes that and waits until the cluster is whole (docs/cluster.md,
"Partitions").

A RabbitMQ cluster (`up --rabbitmq-nodes 3`, or JOBRELAY_RABBITMQ_NODES=3 for `make run`,
`make test`, `make chaos`): N nodes on 127.0.0.1, each with its own AMQP, management and
distribution ports (free ones) and node name (jobrelay-<amqp port>@localhost), config and pid file
(<base>/rabbitmq for node 1, <base>/rabbitmq/node<k> for node k), data under
<base>/rabbitmq/mnesia/<node name>, logs in <base>/logs/rabbitmq/<node name>.log, and one shared
Erlang cookie. The nodes boot in parallel, then nodes 2..N join node 1 (rabbitmqctl stop_app,
join_cluster, start_app); `up` returns once node 1 sees them all running, none partitioned.
The nodes' net tick time is 10 s (60 s by default): a frozen node is declared down after 7.5 to
12.5 s, and only then do the quorum queues it led move on. A node frozen that long comes back
partitioned from the others: `rabbit-resume` then restarts its app, so that it rejoins them.
`down` stops node 1 last and keeps the data (the cluster comes back whole at the next `up` with
the same N); asking for another N starts RabbitMQ afresh.

Environment:
    JOBRELAY_SERVERS_DIR          base directory (default: <repo>/.local/servers)
    JOBRELAY_PG_PORT, JOBRELAY_AMQP_PORT, JOBRELAY_RABBITMQ_MGMT_PORT,
    JOBRELAY_RABBITMQ_DIST_PORT   fixed ports (default: free ports picked at `up`)
    JOBRELAY_PG_BINDIR            PostgreSQL bin dir (default: newest /usr/lib/postgresql/*/bin)
    ERL_EPMD_PORT                 epmd port for our RabbitMQ node (default 4369, shared with
                                  other Erlang nodes; an epmd we started is stopped by `down`
                                  once no node is registered in it)

    JOBRELAY_RABBITMQ_NODES       how many RabbitMQ nodes `up` and `run` start (default 1)
    JOBRELAY_RABBITMQ_NETNS       1: the nodes in network namespaces, as --rabbitmq-netns

Exported by `up` / `env` (also written to <base>/env):
    JOBRELAY_DATABASE_URL, JOBRELAY_AMQP_URL, JOBRELAY_RABBITMQ_API_URL,
    JOBRELAY_SERVERS_DIR, JOBRELAY_RABBITMQ_NODE (node 1's name)
  and for a cluster:
    JOBRELAY_AMQP_URL             every node's URL, comma-separated, node 1 first
    JOBRELAY_RABBITMQ_NODES       the number of nodes (a later `up` keeps the cluster)
    JOBRELAY_RABBITMQ_CLUSTER     the nodes as JSON: [{"number", "name", "amqp_port",
                                  "mgmt_port", "dist_port", "amqp_url", "api_url"}, ...]
    JOBRELAY_QUORUM_GROUP_SIZE    the number of nodes (jobrelay's queues: a replica on each)
    JOBRELAY_RABBITMQ_NETNS       1 when the nodes live in network namespaces

Importable (load by path with importlib): up(rabbitmq_nodes=None, rabbitmq_netns=False),
down(delete_data=...), status(), read_env(), rabbit_nodes() (the nodes as in
JOBRELAY_RABBITMQ_CLUSTER, also for one node), pg_stop(), pg_start(), pg_restart(),
rabbitmqctl(*args, node=1), rabbit_restart_app(node=1), rabbit_stop_app(n), rabbit_start_app(n),
rabbit_kill(n), rabbit_start(n), rabbit_pause(n), rabbit_resume(n), rabbit_partition(grudges),
rabbit_heal_partition(). They raise ServerError on expected failures. The code is in
scripts/localservers/.
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
    rabbit_heal_partition,
    rabbit_kill,
    rabbit_nodes,
    rabbit_partition,
    rabbit_pause,
    rabbit_restart_app,
    rabbit_resume,
    rabbit_start,
    rabbit_start_app,
    rabbit_stop_app,
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
    "rabbit_heal_partition",
    "rabbit_kill",
    "rabbit_nodes",
    "rabbit_partition",
    "rabbit_pause",
    "rabbit_restart_app",
    "rabbit_resume",
    "rabbit_start",
    "rabbit_start_app",
    "rabbit_stop_app",
    "rabbitmqctl",
    "read_env",
    "status",
    "up",
]

if __name__ == "__main__":
    sys.exit(main())
