"""`scripts/servers.py COMMAND`: argument parsing and one function per command."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from .common import (
    STOP_SIGNALS,
    Interrupted,
    Layout,
    ServerError,
    base_dir,
    layout,
    load_state,
    locked,
    log,
    raise_interrupted,
)
from .lifecycle import (
    data_paths,
    format_exports,
    has_data,
    read_env,
    requested_netns,
    requested_nodes,
    start_all,
    status,
    stop_all,
)
from .patroni import PatroniCluster, cluster_env, patroni_down, patroni_up
from .pgbouncer import PgBouncer, started as pgbouncer_started
from .postgres import pg_restart, pg_start, pg_stop
from .rabbitmq import (
    rabbit_kill,
    rabbit_pause,
    rabbit_restart_app,
    rabbit_resume,
    rabbit_start,
    rabbit_start_app,
    rabbit_stop_app,
    rabbitmqctl_passthrough,
)

DESCRIPTION = "Throwaway PostgreSQL + RabbitMQ servers for jobrelay development, tests and CI."
SIMPLE_COMMANDS = {
    "status": "show what is running (exit 1 unless all of it is up)",
    "env": "print the export lines of the running servers",
    "pg-stop": "immediate (crash-like) PostgreSQL stop",
    "pg-start": "start PostgreSQL again and wait until ready",
    "pg-restart": "pg-stop, then pg-start",
}
# Fault helpers acting on one RabbitMQ node, by number (1 to N; 1 is the single node).
NODE_COMMANDS: dict[str, tuple[str, Callable[[int], None]]] = {
    "rabbit-restart-app": ("stop_app + start_app, wait until ready", rabbit_restart_app),
    "rabbit-stop-app": ("rabbitmqctl stop_app (the node stops serving)", rabbit_stop_app),
    "rabbit-start-app": ("rabbitmqctl start_app, wait until ready", rabbit_start_app),
    "rabbit-kill": ("SIGKILL the node's beam.smp", rabbit_kill),
    "rabbit-start": ("start a killed node again (it rejoins), wait until ready", rabbit_start),
    "rabbit-pause": ("SIGSTOP the node's beam.smp and its children", rabbit_pause),
    "rabbit-resume": ("SIGCONT the node's processes, wait until it serves", rabbit_resume),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="scripts/servers.py",
        description=DESCRIPTION,
        epilog="See the module docstring for details.",
    )
    sub = top.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    p_up = sub.add_parser(
        "up",
        help="start both servers (idempotent) and print export lines",
        description="Start both servers (idempotent) and print export lines.",
    )
    add_nodes_option(p_up)
    for name, text in SIMPLE_COMMANDS.items():
        sub.add_parser(name, help=text, description=text)
    for name, (text, _action) in NODE_COMMANDS.items():
        p_node = sub.add_parser(name, help=text, description=text)
        default = 1 if name == "rabbit-restart-app" else None
        p_node.add_argument(
            "node",
            type=node_number,
            nargs="?" if default else None,
            default=default,
            help="node number, 1 to N" + (" (default 1)" if default else ""),
        )
    p_down = sub.add_parser(
        "down",
        help="stop both servers, keeping their data for the next up",
        description="Stop both servers. Their data (PostgreSQL databases, RabbitMQ queues and "
        "messages) is kept for the next `up`, unless --delete-data.",
    )
    p_down.add_argument(
        "--delete-data", action="store_true", help="delete their data too, saying what it deletes"
    )
    p_run = sub.add_parser("run", help="up, run CMD with the env merged in, down")
    p_run.add_argument("--keep", action="store_true", help="leave the servers running")
    add_nodes_option(p_run)
    p_run.add_argument(
        "--pgbouncer",
        action="store_true",
        help="put a PgBouncer (pool_mode=transaction) in front of PostgreSQL for CMD: "
        "JOBRELAY_DATABASE_URL goes through it, JOBRELAY_DIRECT_DATABASE_URL does not",
    )
    add_postgres_ha_options(p_run)
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p_ctl = sub.add_parser("rabbitmqctl", help="rabbitmqctl against our node (or --node N)")
    p_ctl.add_argument(
        "--node", type=node_number, default=1, help="which node of a cluster (default 1)"
    )
    p_ctl.add_argument("args", nargs=argparse.REMAINDER, help="rabbitmqctl arguments")
    return top


def add_nodes_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--rabbitmq-nodes",
        type=node_number,
        default=None,
        metavar="N",
        help="run RabbitMQ as a cluster of N nodes on this machine (default: "
        "$JOBRELAY_RABBITMQ_NODES, else 1)",
    )
    command.add_argument(
        "--rabbitmq-netns",
        action="store_true",
        help="the cluster's nodes in network namespaces jr-rmq1..N on a private bridge "
        "(10.203.0.0/24), where partitions can cut them apart (root; "
        "or $JOBRELAY_RABBITMQ_NETNS=1; docs/cluster.md)",
    )


def add_postgres_ha_options(command: argparse.ArgumentParser) -> None:
    ha = command.add_mutually_exclusive_group()
    for flag, mode, text in (
        ("--postgres-ha", "sync", "a synchronous standby"),
        ("--postgres-ha-async", "async", "an asynchronous standby (what a failover can lose)"),
    ):
        ha.add_argument(
            flag,
            dest="postgres_ha",
            action="store_const",
            const=mode,
            help=f"PostgreSQL under Patroni for CMD: etcd, a primary and {text}; "
            "JOBRELAY_DATABASE_URL is their multi-host URL, JOBRELAY_PATRONI_CLUSTER "
            "describes the nodes",
        )


def node_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a node number (1, 2, ...): {text!r}")
    return int(text)


def after_dashes(words: list[str]) -> list[str]:
    """REMAINDER keeps a leading `--`: drop it."""
    return words[1:] if words[:1] == ["--"] else words


# --- commands -----------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    nodes = requested_nodes(args.rabbitmq_nodes)
    lay = layout()
    with locked(lay):
        env, started = start_all(lay, nodes, requested_netns(args.rabbitmq_netns))
    log(
        f"ready in {time.monotonic() - t0:.1f}s ({lay.env})"
        if started
        else f"already running ({lay.env})"
    )
    sys.stdout.write(format_exports(env))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    lay = layout()
    with locked(lay):
        ran = stop_all(lay, delete_data=args.delete_data)
        kept = data_paths(lay)
    log("stopped" if ran else "nothing was running")
    if args.delete_data:
        log(f"data deleted; the next `up` starts empty servers in {lay.base}")
    elif kept:
        log(
            f"data kept in {lay.base} for the next `up` (delete it with "
            "`scripts/servers.py down --delete-data` or `make down DELETE=1`)"
        )
    return 0


def cmd_status(_args: argparse.Namespace) -> int:
    states = status()
    print(f"base: {base_dir()}")
    for name, text in states.items():
        print(f"{name}: {text}")
    return 0 if all(t.startswith("running") for t in states.values()) else 1


def cmd_env(_args: argparse.Namespace) -> int:
    sys.stdout.write(format_exports(read_env()))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    nodes = requested_nodes(args.rabbitmq_nodes)
    return run_with_servers(
        after_dashes(args.command),
        args.keep,
        nodes,
        args.pgbouncer,
        args.postgres_ha,
        requested_netns(args.rabbitmq_netns),
    )


def cmd_rabbitmqctl(args: argparse.Namespace) -> int:
    return rabbitmqctl_passthrough(after_dashes(args.args), node=args.node)


def quietly(action: Callable[[], None]) -> Callable[[argparse.Namespace], int]:
    """A fault helper as a command: it prints nothing and raises ServerError on failure."""

    def command(_args: argparse.Namespace) -> int:
        action()
        return 0

    return command


def on_node(action: Callable[[int], None]) -> Callable[[argparse.Namespace], int]:
    """A fault helper on one RabbitMQ node as a command (quiet, like the others)."""

    def command(args: argparse.Namespace) -> int:
        action(args.node)
        return 0

    return command


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
    "run": cmd_run,
    "rabbitmqctl": cmd_rabbitmqctl,
    "pg-stop": quietly(pg_stop),
    "pg-start": quietly(pg_start),
    "pg-restart": quietly(pg_restart),
    **{name: on_node(action) for name, (_text, action) in NODE_COMMANDS.items()},
}


# --- run -- CMD ---------------------------------------------------------------------------------


def run_with_servers(
    command: list[str],
    keep: bool,
    nodes: int = 1,
    pgbouncer: bool = False,
    postgres_ha: str | None = None,
    netns: bool = False,
) -> int:
    """up, run `command` with the env merged in, down (unless --keep or pre-existing)."""
    if not command:
        raise ServerError("run needs a command: scripts/servers.py run -- CMD ARGS...")
    lay = layout()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: object) -> None:
        if child is not None and child.poll() is None:
            if signum != signal.SIGINT:  # the terminal already delivered SIGINT to the child
                child.send_signal(signum)
        else:
            raise_interrupted(signum, frame)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    started = False
    rc = 1
    kept_data = has_data(lay)  # an earlier `down` kept it: stop afterwards, but keep it
    bouncer: PgBouncer | None = None
    ha_cluster: PatroniCluster | None = None
    try:
        with locked(lay):
            started = True  # if up fails half-way, still clean up
            env, started = start_all(lay, nodes, netns)
        if not started:
            log("servers were already running; leaving them running afterwards")
        if pgbouncer:
            bouncer, env = pgbouncer_started(lay, load_state(lay), env)
        if postgres_ha:  # a new Patroni cluster beside the servers, deleted after CMD
            ha_cluster = patroni_up(lay, synchronous=postgres_ha == "sync")
            env = {**env, **cluster_env(ha_cluster)}
        child = spawn(command, env)
        rc = child.wait()
        rc = 128 - rc if rc < 0 else rc  # killed by signal N: exit 128+N like a shell
    except Interrupted as exc:
        rc = exc.exit_code
    finally:
        if bouncer is not None:
            bouncer.stop()
        if ha_cluster is not None and not keep:
            for sig in STOP_SIGNALS:  # a second Ctrl-C must not leave the cluster behind
                signal.signal(sig, signal.SIG_IGN)
            patroni_down(ha_cluster)
        if started and not keep:
            stop_after_run(lay, kept_data)
    return rc


def spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(command, env={**os.environ, **env})
    except OSError as exc:
        raise ServerError(f"cannot run {command[0]}: {exc.strerror}") from exc


def stop_after_run(lay: Layout, kept_data: bool) -> None:
    # A second Ctrl-C must not interrupt the clean-up and leave servers behind.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    with locked(lay):
        stop_all(lay, delete_data=not kept_data)
    log("stopped" + (f" (data kept in {lay.base})" if kept_data else ""))


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for sig in STOP_SIGNALS:
        signal.signal(sig, raise_interrupted)
    try:
        return COMMANDS[args.cmd](args)
    except ServerError as exc:
        print(f"servers: error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"servers: interrupted ({exc})", file=sys.stderr)
        return exc.exit_code
