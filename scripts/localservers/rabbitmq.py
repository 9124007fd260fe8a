"""The private RabbitMQ node(s) under <base>/rabbitmq: config, start, readiness, stop, a cluster of
several nodes, and the fault helpers. Processes are found by their environment, never by a
remembered pid.

One node unless a cluster is asked for (`up --rabbitmq-nodes N`). Node 1 keeps the paths of the
single node (config and pid file in <base>/rabbitmq); node k has its own in
<base>/rabbitmq/node<k>. Every node shares the Erlang cookie (<base>/rabbitmq/home, so that
rabbitmqctl and the nodes reach one another), the data directory (<base>/rabbitmq/mnesia, one
subdirectory per node name) and the log directory (<base>/logs/rabbitmq/<node name>.log).

A node's OS processes: the `rabbitmq-server` shell wrapper, its `beam.smp` (the node itself; its
pid is in the node's pid file), and under that `erl_child_setup` with its `inet_gethost` and the
disk monitor's `sh`. epmd is shared by every Erlang node of the machine and is never signalled
here (processes_of leaves it out). Pausing a node stops beam.smp and everything under it; the
wrapper only waits.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import netns
from .common import (
    Layout,
    ServerError,
    State,
    kill_and_wait,
    layout,
    locked,
    log,
    node_name,
    port_open,
    processes_of,
    require_state,
    run,
    wait_until,
)

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
RABBIT_READY_TIMEOUT = 90.0
EPMD_PORT = int(os.environ.get("ERL_EPMD_PORT", "4369"))
# A cluster's nodes notice a frozen peer (SIGSTOP: its sockets stay open) only when its net tick
# times out, after 7.5 to 12.5 s with this setting (45 to 75 s by default). Until then every
# metadata change (a binding, a new queue, a queue's new leader) waits for it, so the quorum
# queues it led stall. A node frozen past that comes back partitioned from the others; neither
# autoheal nor pause_minority heals that reliably on 3.10 (the thawed node sees every peer again
# at once), so rabbit-resume restarts its app instead (partitions are left to us: "ignore").
NET_TICKTIME = 10
CLUSTER_CONFIG = f"net_ticktime = {NET_TICKTIME}\ncluster_partition_handling = ignore\n"
# Nodes in network namespaces (`--rabbitmq-netns`) see real partitions, not frozen peers: the
# minority side pauses until it sees a majority again, as RabbitMQ advises for quorum queues
# (docs/cluster.md "Partitions"). The bridge is private, so guest may log in from the services.
NETNS_CLUSTER_CONFIG = (
    f"net_ticktime = {NET_TICKTIME}\ncluster_partition_handling = pause_minority\n"
    "loopback_users = none\n"
)
# Frozen at least this long, a node may have been declared down: resuming it restarts its app.
FROZEN_PAST_TICK = 0.7 * NET_TICKTIME


@dataclass(frozen=True)
class Node:
    """One RabbitMQ node of a servers directory, numbered from 1."""

    number: int
    amqp_port: int
    mgmt_port: int
    dist_port: int
    dir: Path  # its config files and pid file
    stdout: Path  # what rabbitmq-server prints before its own log file opens
    # Node N of a cluster in network namespaces (netns.py) listens on its own address there.
    address: str = "127.0.0.1"
    netns: bool = False

    @property
    def name(self) -> str:
        # A long name with the node's IP address: the namespaces share no host name.
        return f"rabbit@{self.address}" if self.netns else node_name(self.amqp_port)

    def command(self, args: list[str]) -> list[str]:
        """`args` run where the node lives (its namespace, if it has one)."""
        return netns.in_namespace(self.number, args) if self.netns else args

    @property
    def pid_file(self) -> Path:
        return self.dir / "rabbitmq.pid"

    def log_files(self, lay: Layout) -> list[Path]:
        return [self.stdout, lay.rabbit_log_base / f"{self.name}.log"]

    def describe(self) -> dict[str, Any]:
        """What tests and chaos need to reach the node (exported as JOBRELAY_RABBITMQ_CLUSTER)."""
        return {
            "number": self.number,
            "name": self.name,
            "amqp_port": self.amqp_port,
            "mgmt_port": self.mgmt_port,
            "dist_port": self.dist_port,
            "amqp_url": f"amqp://guest:guest@{self.address}:{self.amqp_port}/",
            "api_url": f"http://guest:guest@{self.address}:{self.mgmt_port}/",
        }


def nodes_of(lay: Layout, state: State) -> list[Node]:
    """Node 1 (the single node's ports and paths), then the other nodes of a cluster."""
    first = Node(
        1,
        state.amqp_port,
        state.mgmt_port,
        state.dist_port,
        lay.rabbit,
        lay.rabbit_stdout,
        **_placed(1, state),
    )
    others = [
        Node(
            number,
            amqp,
            mgmt,
            dist,
            lay.rabbit / f"node{number}",
            lay.logs / f"rabbitmq-{number}-stdout.log",
            **_placed(number, state),
        )
        for number, (amqp, mgmt, dist) in enumerate(state.cluster_ports, start=2)
    ]
    return [first, *others]


def _placed(number: int, state: State) -> dict[str, Any]:
    """Where node `number` listens: 127.0.0.1, or its own address in its namespace."""
    if not state.rabbit_netns:
        return {}
    return {"address": netns.node_address(number), "netns": True}


def rabbit_env(lay: Layout, node: Node) -> dict[str, str]:
    """Environment for rabbitmq-server and rabbitmqctl pointing at one of our private nodes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    address = ",".join(node.address.split("."))
    env.update(
        {
            "HOME": str(lay.rabbit_home),
            "RABBITMQ_NODENAME": node.name,
            "RABBITMQ_NODE_IP_ADDRESS": node.address,
            "RABBITMQ_NODE_PORT": str(node.amqp_port),
            "RABBITMQ_DIST_PORT": str(node.dist_port),
            "RABBITMQ_MNESIA_BASE": str(lay.rabbit_mnesia),
            "RABBITMQ_LOG_BASE": str(lay.rabbit_log_base),
            "RABBITMQ_PID_FILE": str(node.pid_file),
            "RABBITMQ_CONFIG_FILE": str(node.dir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(node.dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(node.dir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(node.dir / "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f"-kernel inet_dist_use_interface {{{address}}}",
            # In a namespace, epmd answers the peers on the node's address too.
            "ERL_EPMD_ADDRESS": f"127.0.0.1,{node.address}" if node.netns else "127.0.0.1",
            "ERL_EPMD_PORT": str(EPMD_PORT),
        }
    )
    if node.netns:
        env["RABBITMQ_USE_LONGNAME"] = "true"
    return env


def rabbitmqctl_command(node: Node, *args: str) -> list[str]:
    return node.command([str(RABBITMQ_BIN / "rabbitmqctl"), "-n", node.name, *args])


def ctl(lay: Layout, node: Node, *args: str, timeout: float = 120) -> str:
    """rabbitmqctl against one node; its stdout, or ServerError with its output."""
    cmd = rabbitmqctl_command(node, *args)
    return run(cmd, env=rabbit_env(lay, node), timeout=timeout, cwd=lay.base).stdout


def rabbit_write_config(lay: Layout, node: Node, *, clustered: bool) -> None:
    for path in (lay.rabbit_home, lay.rabbit_mnesia, lay.rabbit_log_base, node.dir):
        path.mkdir(parents=True, exist_ok=True)
    cookie = lay.rabbit_home / ".erlang.cookie"
    if not cookie.exists():  # kept: rabbitmqctl must keep reaching a node started earlier
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
    (node.dir / "rabbitmq-env.conf").write_text("")
    (node.dir / "enabled_plugins").write_text("[rabbitmq_management].\n")
    cluster = (NETNS_CLUSTER_CONFIG if node.netns else CLUSTER_CONFIG) if clustered else ""
    (node.dir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = {node.address}:{node.amqp_port}\n"
        f"management.tcp.ip = {node.address}\n"
        f"management.tcp.port = {node.mgmt_port}\n"
        "loopback_users.guest = true\n"
        "log.console = false\n"
        "log.file.level = info\n" + cluster
    )


# --- processes ----------------------------------------------------------------------------------


def rabbit_pids(lay: Layout) -> list[int]:
    """Live processes of this dir's nodes (shell wrappers, beam.smp, helpers, rabbitmqctl)."""
    return [pid for pid, desc in processes_of(lay).items() if desc.startswith("rabbitmq")]


def node_pids(lay: Layout, node: Node) -> list[int]:
    """Live processes of one node (recognised by RABBITMQ_NODENAME in their environment)."""
    needle = f"RABBITMQ_NODENAME={node.name}".encode()
    return [pid for pid in rabbit_pids(lay) if needle in _environ(pid)]


def _environ(pid: int) -> list[bytes]:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return []


def rabbit_beam_pid(lay: Layout, node: Node) -> int:
    """The node's beam.smp (from its pid file, checked against its live processes), or 0."""
    try:
        pid = int(node.pid_file.read_text().strip())
    except (OSError, ValueError):
        return 0
    return pid if pid in node_pids(lay, node) else 0


def descendants(pid: int) -> list[int]:
    """The processes under `pid` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(proc.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(below)
    return found


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# --- readiness ----------------------------------------------------------------------------------


def mgmt_get(node: Node, path: str, timeout: float = 2.0) -> Any:
    """GET the node's management API as guest; None if it does not answer with 200."""
    req = urllib.request.Request(f"http://{node.address}:{node.mgmt_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp) if resp.status == 200 else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def rabbit_ready(node: Node) -> bool:
    if not port_open(node.amqp_port, node.address):
        return False
    overview = mgmt_get(node, "/api/overview")
    if not isinstance(overview, dict) or overview.get("node") != node.name:
        return False
    # Our node must really own the AMQP port (it could be someone else's listener).
    return any(
        listener.get("protocol") == "amqp" and listener.get("port") == node.amqp_port
        for listener in overview.get("listeners", [])
    )


def cluster_members(node: Node) -> dict[str, bool] | None:
    """The nodes of `node`'s cluster as it sees them ({name: running}); None if it does not
    answer."""
    found = mgmt_get(node, "/api/nodes")
    if not isinstance(found, list):
        return None
    return {str(entry.get("name")): bool(entry.get("running")) for entry in found}


def cluster_formed(nodes: list[Node]) -> bool:
    """Every node answers, node 1 sees them all running in its cluster, and none is
    partitioned from another."""
    members = cluster_members(nodes[0])
    return (
        members is not None
        and all(members.get(node.name) for node in nodes)
        and all(rabbit_ready(node) and not partitioned_from(node) for node in nodes)
    )


def partitioned_from(node: Node) -> list[str]:
    """The nodes `node` has been partitioned from (it says so until the partition heals)."""
    found = mgmt_get(node, "/api/nodes")
    for entry in found if isinstance(found, list) else []:
        if entry.get("name") == node.name:
            return [str(name) for name in entry.get("partitions") or []]
    return []


# --- start and stop -----------------------------------------------------------------------------


def rabbit_launch(lay: Layout, state: State, node: Node) -> None:
    """Start rabbitmq-server detached in its own session (does not wait). Its queues and
    messages (and, in a cluster, its membership) kept by an earlier `down` are used again."""
    rabbit_write_config(lay, node, clustered=state.rabbit_nodes > 1)
    node.pid_file.unlink(missing_ok=True)
    if not node.netns:  # a namespace's own epmd goes with the namespace
        state.epmd_started_by_us = state.epmd_started_by_us or not port_open(EPMD_PORT)
    with open(node.stdout, "w") as out:
        # Own session: a Ctrl-C in the terminal must not reach the node.
        subprocess.Popen(
            node.command([str(RABBITMQ_BIN / "rabbitmq-server")]),
            env=rabbit_env(lay, node),
            cwd=node.dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def rabbit_forget_data(lay: Layout) -> None:
    """Delete every node's queues, messages and cluster membership (the next start is fresh)."""
    shutil.rmtree(lay.rabbit_mnesia, ignore_errors=True)


def rabbit_kept_data(lay: Layout, state: State) -> bool:
    """Whether every node has data from an earlier run (only then is it used again)."""
    return all((lay.rabbit_mnesia / node.name).exists() for node in nodes_of(lay, state))


def rabbit_wait(lay: Layout, node: Node) -> None:
    wait_until(
        lambda: rabbit_ready(node),
        RABBIT_READY_TIMEOUT,
        f"RabbitMQ node {node.number} ({node.name})",
        node.log_files(lay),
        alive=lambda: bool(node_pids(lay, node)),
    )


def rabbit_join(lay: Layout, state: State) -> None:
    """Join every node that is not in node 1's cluster yet (stop_app, join_cluster, start_app),
    one at a time, then wait until node 1 sees them all running."""
    nodes = nodes_of(lay, state)
    first = nodes[0]
    members = cluster_members(first) or {}
    for node in nodes[1:]:
        if node.name in members:
            continue  # joined in an earlier run: its kept data says so
        log(f"joining RabbitMQ node {node.number} ({node.name}) to {first.name}")
        ctl(lay, node, "stop_app")
        ctl(lay, node, "join_cluster", first.name)
        ctl(lay, node, "start_app")
    logs = [path for node in nodes for path in node.log_files(lay)]
    wait_until(lambda: cluster_formed(nodes), RABBIT_READY_TIMEOUT, "the RabbitMQ cluster", logs)


def rabbit_halt(lay: Layout, state: State | None) -> None:
    """SIGKILL every node and its helpers: their data is throwaway, so no graceful stop needed.

    Processes are found by their environment (see processes_of), never by a remembered
    pid or process group that may have been reused since a crash.
    """
    kill_and_wait(rabbit_pids(lay), timeout=0, first=signal.SIGKILL)
    if state and state.epmd_started_by_us:
        epmd_stop_if_unused()


def rabbit_stop(lay: Layout, state: State | None) -> None:
    """Stop the nodes cleanly (queues are kept for the next start), node 1 last, then make
    sure."""
    if state is not None and rabbit_pids(lay):
        signal_all(rabbit_pids(lay), signal.SIGCONT)  # a paused node cannot stop cleanly
        for node in reversed(nodes_of(lay, state)):
            if node_pids(lay, node):
                cmd = rabbitmqctl_command(node, "stop")
                run(cmd, env=rabbit_env(lay, node), timeout=60, check=False, cwd=lay.base)
    rabbit_halt(lay, state)


def epmd_stop_if_unused() -> None:
    """Stop the epmd our node started, but only when no Erlang node is registered in it."""
    epmd = shutil.which("epmd")
    if not epmd:
        return
    names = subprocess.run(
        [epmd, "-port", str(EPMD_PORT), "-names"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if names.returncode == 0 and "name " not in names.stdout:
        # epmd itself refuses -kill while nodes are alive, so this is race-safe.
        subprocess.run(
            [epmd, "-port", str(EPMD_PORT), "-kill"], capture_output=True, stdin=subprocess.DEVNULL
        )


def rabbit_status(lay: Layout, node: Node) -> str:
    if rabbit_ready(node):
        if cut_off := partitioned_from(node):
            return (
                f"node {node.name} partitioned from {', '.join(cut_off)} (restart one side: "
                f"rabbit-restart-app {node.number})"
            )
        return (
            f"running (node {node.name}, pid {rabbit_beam_pid(lay, node)}) amqp {node.address}:"
            f"{node.amqp_port}, management {node.address}:{node.mgmt_port}"
        )
    pids = node_pids(lay, node)
    if pids and any(_paused(pid) for pid in pids):
        return f"node {node.name} paused (SIGSTOP; rabbit-resume {node.number})"
    if pids:
        return f"node {node.name} alive but not serving (app stopped or booting)"
    return f"stopped (node {node.name})"


def _paused(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    return False


# --- fault helpers (tests, chaos) ---------------------------------------------------------------


def chosen_node(number: int = 1) -> tuple[Layout, Node]:
    """Node `number` of the servers of this base dir, or ServerError saying which exist."""
    lay = layout()
    state = require_state(lay)
    nodes = nodes_of(lay, state)
    if not 1 <= number <= len(nodes):
        have = "one node (1)" if len(nodes) == 1 else f"{len(nodes)} nodes (1 to {len(nodes)})"
        raise ServerError(f"no RabbitMQ node {number}: the servers in {lay.base} have {have}")
    return lay, nodes[number - 1]


def rabbit_nodes() -> list[dict[str, Any]]:
    """Every RabbitMQ node of the servers: number, name, ports, amqp_url and api_url."""
    lay = layout()
    return [node.describe() for node in nodes_of(lay, require_state(lay))]


def rabbitmqctl(*args: str, timeout: float = 120, node: int = 1) -> str:
    """Run rabbitmqctl against node `node` (1: the single node); returns stdout, raises
    ServerError on failure."""
    lay, chosen = chosen_node(node)
    return ctl(lay, chosen, *args, timeout=timeout)


def rabbitmqctl_passthrough(args: list[str], node: int = 1) -> int:
    """rabbitmqctl with the terminal's stdin/stdout/stderr (the CLI's `rabbitmqctl`)."""
    lay, chosen = chosen_node(node)
    cmd = rabbitmqctl_command(chosen, *args)
    return subprocess.run(cmd, env=rabbit_env(lay, chosen), cwd=lay.base).returncode


def rabbit_restart_app(node: int = 1) -> None:
    """rabbitmqctl stop_app + start_app, then wait until AMQP and the management API answer."""
    rabbit_stop_app(node)
    rabbit_start_app(node)


def rabbit_stop_app(node: int) -> None:
    """rabbitmqctl stop_app: the node closes its client connections and stops serving (its
    Erlang VM keeps running, still a cluster member)."""
    lay, chosen = chosen_node(node)
    ctl(lay, chosen, "stop_app")


def rabbit_start_app(node: int) -> None:
    """rabbitmqctl start_app, then wait until the node's AMQP and management API answer."""
    lay, chosen = chosen_node(node)
    ctl(lay, chosen, "start_app")
    rabbit_wait(lay, chosen)


def rabbit_kill(node: int) -> None:
    """SIGKILL the node's beam.smp (a crash: clients see their connections reset), and wait
    until its helper processes are gone too."""
    lay, chosen = chosen_node(node)
    beam = rabbit_beam_pid(lay, chosen)
    if not beam:
        raise ServerError(f"RabbitMQ node {node} ({chosen.name}) is not running")
    kill_and_wait([beam], timeout=0, first=signal.SIGKILL)
    deadline = time.monotonic() + 10
    while node_pids(lay, chosen) and time.monotonic() < deadline:
        time.sleep(0.1)  # erl_child_setup and the wrapper end when beam.smp has gone
    kill_and_wait(node_pids(lay, chosen), timeout=0, first=signal.SIGKILL)


def rabbit_start(node: int) -> None:
    """Start a killed (or stopped) node again from its data and wait until it serves: it
    rejoins its cluster by itself. Nothing to do if it already serves."""
    lay, chosen = chosen_node(node)
    with locked(lay):
        state = require_state(lay)
        if rabbit_ready(chosen):
            return
        if node_pids(lay, chosen):
            raise ServerError(
                f"RabbitMQ node {node} ({chosen.name}) runs but does not serve: "
                f"rabbit-start-app {node} or rabbit-resume {node}"
            )
        rabbit_launch(lay, state, chosen)
        rabbit_wait(lay, chosen)


def rabbit_pause(node: int) -> None:
    """SIGSTOP the node's beam.smp and the processes under it: its sockets stay open but
    nothing answers, like a frozen machine. Its shell wrapper and epmd are left alone."""
    lay, chosen = chosen_node(node)
    beam = rabbit_beam_pid(lay, chosen)
    if not beam:
        raise ServerError(f"RabbitMQ node {node} ({chosen.name}) is not running")
    _paused_at(chosen).write_text(f"{time.time()}\n")
    signal_all([beam, *descendants(beam)], signal.SIGSTOP)


def rabbit_resume(node: int) -> None:
    """SIGCONT every process of the node (after rabbit-pause), then wait until it serves. In a
    cluster, a node frozen long enough to have been declared down comes back partitioned from
    the others: its app is restarted (stop_app, start_app), which makes it rejoin them; then
    wait until the cluster is whole."""
    lay, chosen = chosen_node(node)
    state = require_state(lay)
    pids = node_pids(lay, chosen)
    if not pids:
        raise ServerError(f"RabbitMQ node {node} ({chosen.name}) is not running")
    frozen_for = _frozen_for(chosen)
    signal_all(pids, signal.SIGCONT)
    nodes = nodes_of(lay, state)
    if len(nodes) > 1 and frozen_for >= FROZEN_PAST_TICK:
        ctl(lay, chosen, "stop_app")
        ctl(lay, chosen, "start_app")
    rabbit_wait(lay, chosen)
    if len(nodes) > 1:
        logs = [path for each in nodes for path in each.log_files(lay)]
        wait_until(lambda: cluster_formed(nodes), RABBIT_READY_TIMEOUT, "the cluster", logs)


def _paused_at(node: Node) -> Path:
    return node.dir / "paused-at"


def _frozen_for(node: Node) -> float:
    """Seconds since rabbit-pause froze the node (forgetting it); 0 if unknown."""
    path = _paused_at(node)
    try:
        paused = float(path.read_text())
    except (OSError, ValueError):
        return 0.0
    path.unlink(missing_ok=True)
    return time.time() - paused


# --- partitions (a cluster in network namespaces) -----------------------------------------------


def netns_nodes() -> tuple[Layout, list[Node]]:
    """The nodes of a cluster in network namespaces, or ServerError saying how to get one."""
    lay = layout()
    state = require_state(lay)
    if not state.rabbit_netns or state.rabbit_nodes < 2:
        raise ServerError(
            f"partitions need a RabbitMQ cluster in network namespaces (scripts/servers.py up "
            f"--rabbitmq-nodes 3 --rabbitmq-netns); the servers in {lay.base} have none"
        )
    return lay, nodes_of(lay, state)


def rabbit_partition(grudges: dict[int, list[int]]) -> None:
    """Node n drops every packet from the nodes grudges[n] (node numbers, from 1); the others'
    traffic is untouched. A second call replaces the first partition."""
    _lay, nodes = netns_nodes()
    netns.partition({node: set(senders) for node, senders in grudges.items()}, len(nodes))


def rabbit_heal_partition(patience: float = 60.0) -> list[int]:
    """Every node hears every other again; then wait until the cluster is whole (every node
    serves, none reports a partition). pause_minority starts a paused minority again by itself;
    a node that still does not serve `patience` seconds after the heal, then one that still
    reports a partition, is restarted (SIGKILL, start: it rejoins from its data), one at a
    time. (A paused node can hang in its own restart on 3.10.8 with Erlang 25, its `stop_app`
    too: only a new VM brings it back; docs/cluster.md "Partitions".) Returns the nodes so
    restarted."""
    lay, nodes = netns_nodes()
    netns.heal(len(nodes))
    logs = [path for node in nodes for path in node.log_files(lay)]
    with contextlib.suppress(ServerError):
        wait_until(lambda: cluster_formed(nodes), patience, "the healed cluster", logs)
        return []
    stuck = [node for node in nodes if not rabbit_ready(node)]
    restarted = [_restart(node, "does not serve") for node in stuck]
    for node in nodes:
        if partitioned_from(node):  # asked again: a restart before may have cleared it
            restarted.append(_restart(node, "reports a partition"))
    wait_until(lambda: cluster_formed(nodes), RABBIT_READY_TIMEOUT, "the healed cluster", logs)
    return restarted


def _restart(node: Node, why: str) -> int:
    log(f"node {node.name} {why} after the partition healed: restarting it")
    rabbit_kill(node.number)
    rabbit_start(node.number)
    return node.number
