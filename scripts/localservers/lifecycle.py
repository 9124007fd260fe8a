"""Both servers together: the ports they get, starting and stopping them as one, and the
`export` lines that point jobrelay at them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from .common import (
    PORT_ENV,
    Layout,
    ServerError,
    State,
    ensure_package,
    free_ports,
    kill_and_wait,
    layout,
    load_state,
    locked,
    log,
    port_free,
    processes_of,
    save_state,
)
from .netns import netns_down, netns_up
from .patroni import patroni_down_all
from .postgres import pg_bindir, pg_ensure, pg_halt, pg_ready, pg_running, pg_status
from .rabbitmq import (
    RABBITMQ_BIN,
    Node,
    cluster_formed,
    nodes_of,
    rabbit_forget_data,
    rabbit_halt,
    rabbit_join,
    rabbit_kept_data,
    rabbit_launch,
    rabbit_pids,
    rabbit_ready,
    rabbit_status,
    rabbit_stop,
    rabbit_wait,
)

RABBIT_PORT_KEYS = ["amqp", "mgmt", "dist"]
NODES_ENV = "JOBRELAY_RABBITMQ_NODES"
NETNS_ENV = "JOBRELAY_RABBITMQ_NETNS"
MAX_NODES = 9

# --- the environment ----------------------------------------------------------------------------


def env_vars(lay: Layout, state: State) -> dict[str, str]:
    """The variables for jobrelay. A cluster's JOBRELAY_AMQP_URL lists every node, node 1
    first; JOBRELAY_RABBITMQ_API_URL and JOBRELAY_RABBITMQ_NODE stay node 1's."""
    nodes = nodes_of(lay, state)
    env = {
        "JOBRELAY_DATABASE_URL": f"postgresql+psycopg://jobrelay:jobrelay@127.0.0.1:{state.pg_port}/jobrelay",
        "JOBRELAY_AMQP_URL": ",".join(node.describe()["amqp_url"] for node in nodes),
        "JOBRELAY_RABBITMQ_API_URL": nodes[0].describe()["api_url"],
        "JOBRELAY_SERVERS_DIR": str(lay.base),
        "JOBRELAY_RABBITMQ_NODE": nodes[0].name,
    }
    if len(nodes) > 1:
        env[NODES_ENV] = str(len(nodes))  # a later `up` in this environment keeps the cluster
        env["JOBRELAY_RABBITMQ_CLUSTER"] = json.dumps(
            [node.describe() for node in nodes], separators=(",", ":")
        )
        # jobrelay's quorum queues with a replica on every node, said explicitly.
        env["JOBRELAY_QUORUM_GROUP_SIZE"] = str(len(nodes))
    if state.rabbit_netns:
        env[NETNS_ENV] = "1"  # a later `up` in this environment keeps the namespaces
    return env


def format_exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def read_env() -> dict[str, str]:
    """The variables exported by the last `up` in this base dir."""
    lay = layout()
    try:
        lines = lay.env.read_text().splitlines()
    except FileNotFoundError:
        raise ServerError(
            f"servers are not running in {lay.base} (run: scripts/servers.py up)"
        ) from None
    env: dict[str, str] = {}
    for line in lines:
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            env[key] = value
    return env


# --- ports --------------------------------------------------------------------------------------


def requested_nodes(nodes: int | None = None) -> int:
    """How many RabbitMQ nodes to run: `nodes` (--rabbitmq-nodes), else
    $JOBRELAY_RABBITMQ_NODES, else 1."""
    if nodes is None:
        value = os.environ.get(NODES_ENV, "").strip() or "1"
        if not value.isdigit():
            raise ServerError(f"{NODES_ENV} must be a number of nodes (1 to {MAX_NODES})")
        nodes = int(value)
    if not 1 <= nodes <= MAX_NODES:
        raise ServerError(f"a RabbitMQ cluster here has 1 to {MAX_NODES} nodes, not {nodes}")
    return nodes


def requested_netns(netns: bool = False) -> bool:
    """Whether the RabbitMQ nodes live in network namespaces: --rabbitmq-netns, else
    $JOBRELAY_RABBITMQ_NETNS=1."""
    return netns or os.environ.get(NETNS_ENV, "").strip() == "1"


def desired_ports(previous: State | None) -> tuple[dict[str, int], set[str]]:
    """Ports from JOBRELAY_*_PORT, else those of the previous run, else fresh free ones.

    Returns the ports and the keys that were fixed through the environment.
    """
    ports: dict[str, int] = {}
    fixed: set[str] = set()
    for key, var in PORT_ENV.items():
        if value := os.environ.get(var):
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise ServerError(f"{var} must be a port number, got {value!r}")
            ports[key] = int(value)
            fixed.add(key)
        elif previous is not None:
            ports[key] = getattr(previous, f"{key}_port")
    missing = [k for k in PORT_ENV if k not in ports]
    fresh = iter(p for p in free_ports(len(missing) + 4) if p not in ports.values())
    for key in missing:
        ports[key] = next(fresh)
    return ports, fixed


def desired_cluster_ports(previous: State | None, state: State, nodes: int) -> list[list[int]]:
    """The other nodes' ports: those of the previous run while it had the same nodes, else
    fresh ones."""
    if previous is not None and previous.rabbit_nodes == nodes:
        return [list(ports) for ports in previous.cluster_ports]
    taken = set(state.ports())
    fresh = iter(p for p in free_ports(3 * nodes + 4) if p not in taken)
    return [[next(fresh), next(fresh), next(fresh)] for _ in range(nodes - 1)]


def settle_ports(state: State, keys: list[str], fixed: set[str]) -> None:
    """Make sure the ports of the servers about to start are free.

    A busy port fixed via JOBRELAY_*_PORT is an error; a busy port remembered from a
    previous run is silently replaced by a fresh one.
    """
    for key in keys:
        port = getattr(state, f"{key}_port")
        if port_free(port):
            continue
        if key in fixed:
            raise ServerError(f"port {port} ({PORT_ENV[key]}) is already in use on 127.0.0.1")
        setattr(state, f"{key}_port", _fresh_port(state))


def settle_cluster_ports(state: State) -> None:
    """The other nodes' ports, as settle_ports does for node 1's (none is fixed)."""
    for ports in state.cluster_ports:
        for index, port in enumerate(ports):
            if not port_free(port):
                ports[index] = _fresh_port(state)


def _fresh_port(state: State) -> int:
    taken = set(state.ports())
    return next(p for p in free_ports(len(taken) + 1) if p not in taken)


# --- start and stop -----------------------------------------------------------------------------


def start_all(lay: Layout, nodes: int = 1, netns: bool = False) -> tuple[dict[str, str], bool]:
    """Ensure both servers run, RabbitMQ as `nodes` clustered nodes (in network namespaces if
    `netns`); returns (env, whether anything had to be started)."""
    if netns and nodes < 2:
        raise ServerError("--rabbitmq-netns is for a cluster: add --rabbitmq-nodes 3")
    previous = load_state(lay)
    ports, fixed = desired_ports(previous)
    state = State(ports["pg"], ports["amqp"], ports["mgmt"], ports["dist"])
    state.cluster_ports = desired_cluster_ports(previous, state, nodes)
    state.rabbit_netns = netns
    same_rabbit = previous is not None and _node_names(lay, previous) == _node_names(lay, state)
    if previous is not None and same_rabbit:
        state.epmd_started_by_us = previous.epmd_started_by_us
    pg_ok = (
        previous is not None
        and previous.pg_port == state.pg_port
        and pg_running(lay) > 0
        and pg_ready(lay, state)
    )
    rabbit_ok = same_rabbit and bool(rabbit_pids(lay)) and _rabbit_serves(lay, state)
    if pg_ok and rabbit_ok:
        return env_vars(lay, state), False

    ensure_package(RABBITMQ_BIN / "rabbitmq-server", "rabbitmq-server")
    pg_bindir()  # installs PostgreSQL if missing
    lay.logs.mkdir(parents=True, exist_ok=True)
    # Stop stale/unhealthy servers of this dir first so that their ports become free.
    if not rabbit_ok:
        rabbit_halt(lay, previous)
        if previous is not None and previous.rabbit_netns:
            netns_down()
        settle_ports(state, RABBIT_PORT_KEYS, fixed)
        settle_cluster_ports(state)
        _forget_other_cluster(lay, previous, state)
    if not pg_ok:
        pg_halt(lay, "immediate")
        settle_ports(state, ["pg"], fixed)
    kept_data = has_data(lay) or lay.rabbit_mnesia.exists()  # from an earlier `down`
    try:
        _start(lay, state, pg_ok=pg_ok, rabbit_ok=rabbit_ok)
    except BaseException:
        # Do not leave half-started servers behind; the logs/ directory is kept, and so is the
        # data an earlier `down` kept.
        save_state(lay, state)
        stop_all(lay, delete_data=not kept_data)
        raise
    env = env_vars(lay, state)
    lay.env.write_text(format_exports(env))
    return env, True


def _node_names(lay: Layout, state: State) -> list[str]:
    return [node.name for node in nodes_of(lay, state)]


def _rabbit_serves(lay: Layout, state: State) -> bool:
    nodes = nodes_of(lay, state)
    return rabbit_ready(nodes[0]) if len(nodes) == 1 else cluster_formed(nodes)


def _forget_other_cluster(lay: Layout, previous: State | None, state: State) -> None:
    """Kept RabbitMQ data of a cluster is used again only by the same nodes: a node's data
    names its peers, and a node whose peers changed would wait for them in vain. (A single
    node whose port changed starts empty beside its old data, as it always did.)"""
    if previous is None or not lay.rabbit_mnesia.exists():
        return
    if max(previous.rabbit_nodes, state.rabbit_nodes) == 1:
        return
    if _node_names(lay, previous) != _node_names(lay, state):
        log(
            f"RabbitMQ goes from {previous.rabbit_nodes} to {state.rabbit_nodes} node(s) (or "
            "new ports): starting it afresh, without the queues and messages it kept"
        )
        rabbit_forget_data(lay)


def _start(lay: Layout, state: State, *, pg_ok: bool, rabbit_ok: bool) -> None:
    """Start whichever server is not healthy: RabbitMQ first (slow boot; a cluster's nodes all
    at once), PostgreSQL while it boots, then join the cluster's nodes."""
    kept_rabbit = rabbit_kept_data(lay, state)
    if not rabbit_ok and state.rabbit_netns:
        netns_up(state.rabbit_nodes, lay.rabbit_mnesia)
    if not rabbit_ok:
        _launch_all(lay, state, kept=kept_rabbit)
    save_state(lay, state)  # before waiting: an interrupted start must still be cleaned up
    if not pg_ok:
        log(f"starting PostgreSQL on 127.0.0.1:{state.pg_port}")
        pg_ensure(lay, state)
    if not rabbit_ok:
        _wait_for_rabbit(lay, state, kept_rabbit=kept_rabbit)
        if state.rabbit_nodes > 1:
            rabbit_join(lay, state)


def _launch_all(lay: Layout, state: State, *, kept: bool) -> None:
    nodes = nodes_of(lay, state)
    if len(nodes) == 1:
        log(f"starting RabbitMQ node {_ports(nodes[0])}" + (" with its kept data" if kept else ""))
    else:
        log(
            f"starting a RabbitMQ cluster of {len(nodes)} nodes"
            + (" with their kept data" if kept else "")
            + ": "
            + ", ".join(f"{node.number}: {_ports(node)}" for node in nodes)
        )
    for node in nodes:
        rabbit_launch(lay, state, node)


def _ports(node: Node) -> str:
    return f"{node.name} (amqp {node.amqp_port}, management {node.mgmt_port})"


def _wait_for_rabbit(lay: Layout, state: State, *, kept_rabbit: bool) -> None:
    """Wait for every node; if they do not come up from their kept data, start afresh once."""
    try:
        for node in nodes_of(lay, state):
            rabbit_wait(lay, node)
    except ServerError as exc:
        if not kept_rabbit:
            raise
        log(
            "RabbitMQ did not start from its kept data, starting it afresh: "
            f"{str(exc).splitlines()[0]}"
        )
        rabbit_halt(lay, state)
        rabbit_forget_data(lay)
        _launch_all(lay, state, kept=False)
        for node in nodes_of(lay, state):
            rabbit_wait(lay, node)


def data_paths(lay: Layout) -> dict[str, Path]:
    """What `down --delete-data` deletes, by what it holds (only the paths that exist)."""
    paths = {
        "PostgreSQL data (databases, jobs, clients)": lay.pg,
        "RabbitMQ data (queues and their messages)": lay.rabbit,
    }
    return {what: path for what, path in paths.items() if path.exists()}


def has_data(lay: Layout) -> bool:
    return lay.pg_bootstrapped.exists()


def stop_all(lay: Layout, *, delete_data: bool = True) -> bool:
    """Stop both servers of this base dir; delete their data only if `delete_data`.
    Returns whether anything ran."""
    state = load_state(lay)
    was_running = bool(processes_of(lay))
    patroni_down_all(lay)  # Patroni clusters a killed `run --postgres-ha` left
    pg_halt(lay, "fast")
    if delete_data:
        rabbit_halt(lay, state)  # its data goes anyway: no need to wait for a clean stop
    else:
        rabbit_stop(lay, state)
    if state is not None and state.rabbit_netns:
        netns_down()  # the namespaces' epmd, veths and partition rules, and the bridge
    leftovers = processes_of(lay)
    if leftovers:
        kill_and_wait(list(leftovers), timeout=3)
    lay.env.unlink(missing_ok=True)  # nothing runs: the export lines are stale
    if delete_data:
        _delete_data(lay)
    # Kept: state.json (the ports, hence the RabbitMQ node name its data belongs to) and logs/.
    return was_running


def _delete_data(lay: Layout) -> None:
    for what, path in data_paths(lay).items():
        log(f"deleting {what}: {path}")
    for path in (lay.pg, lay.pg_socket, lay.rabbit):
        shutil.rmtree(path, ignore_errors=True)
    lay.state.unlink(missing_ok=True)


# --- the importable API -------------------------------------------------------------------------


def up(rabbitmq_nodes: int | None = None, rabbitmq_netns: bool = False) -> dict[str, str]:
    """Start both servers (idempotent) and return the JOBRELAY_* variables. RabbitMQ runs as
    `rabbitmq_nodes` clustered nodes (default: $JOBRELAY_RABBITMQ_NODES, else 1), in network
    namespaces if `rabbitmq_netns` (or $JOBRELAY_RABBITMQ_NETNS=1)."""
    nodes = requested_nodes(rabbitmq_nodes)
    lay = layout()
    with locked(lay):
        return start_all(lay, nodes, requested_netns(rabbitmq_netns))[0]


def down(*, delete_data: bool = False) -> None:
    """Stop both servers, keeping their data for the next `up` unless `delete_data`."""
    lay = layout()
    with locked(lay):
        stop_all(lay, delete_data=delete_data)


def status() -> dict[str, str]:
    """{"postgres": ..., "rabbitmq": ...} human-readable states; a cluster's nodes are
    "rabbitmq-1", "rabbitmq-2", ..."""
    lay = layout()
    state = load_state(lay)
    if state is None:
        stray = processes_of(lay)
        note = f" ({len(stray)} stray processes, run down)" if stray else ""
        return {"postgres": "not running" + note, "rabbitmq": "not running" + note}
    states = {"postgres": pg_status(lay, state)}
    nodes = nodes_of(lay, state)
    if len(nodes) == 1:
        states["rabbitmq"] = rabbit_status(lay, nodes[0])
    else:
        for node in nodes:
            states[f"rabbitmq-{node.number}"] = rabbit_status(lay, node)
    return states
