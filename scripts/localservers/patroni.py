"""PostgreSQL under Patroni (`servers.py run --postgres-ha`): one etcd and two Patroni nodes on
127.0.0.1, a primary and a synchronous standby (or an asynchronous one, `--postgres-ha-async`),
under <base>/patroni; and the primary faults the chaos profile `pg-failover` injects.

Every cluster is new and has a directory of its own, <base>/patroni/<scope> (the scope names
the cluster in etcd: jobrelay-<etcd port>), so that two runs at once in one servers dir do not
meet: etcd's data in etcd/, each node's patroni.yml, data and sock in node<k>/, and cluster.json
(what JOBRELAY_PATRONI_CLUSTER points at: the ports, paths and mode); logs in
<base>/logs/<scope>/{etcd,patroni-node<k>}.log, kept after the cluster is deleted. Patroni and
PostgreSQL run as the postgres OS user (PostgreSQL refuses root); etcd runs as the caller.
Processes are found by their command line (the config path, the data dir), so any process may
act on them, not only the one that started them. Stdlib only, like the rest of scripts/localservers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .common import (
    Layout,
    ServerError,
    ensure_package,
    free_ports,
    kill_and_wait,
    layout,
    log,
    pid_alive,
    port_open,
    run,
    wait_until,
)
from .postgres import as_pg_user, give_to_pg_user, pg_bindir

CLUSTER_ENV = "JOBRELAY_PATRONI_CLUSTER"
NODES = 2
START_TIMEOUT = 120.0
HEALTHY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
# Failure detection: the leader key lives TTL seconds without a renewal; Patroni's loop runs
# every LOOP_WAIT s and gives the DCS and PostgreSQL RETRY_TIMEOUT s (loop_wait + 2 * retry
# <= ttl, as Patroni asks). Short, for tests; production keeps Patroni's 30/10/10.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 12, 2, 5


@dataclass
class PatroniNode:
    name: str
    pg_port: int
    rest_port: int
    dir: str

    @property
    def config(self) -> str:
        return str(Path(self.dir) / "patroni.yml")

    @property
    def data_dir(self) -> str:
        return str(Path(self.dir) / "data")

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"


@dataclass
class PatroniCluster:
    """The cluster as cluster.json records it (the chaos faults read it back)."""

    scope: str
    synchronous: bool
    etcd_client_port: int
    etcd_peer_port: int
    base: str
    nodes: list[PatroniNode] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return Path(self.base) / "patroni" / self.scope

    @property
    def file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client_port}"

    def node(self, name: str) -> PatroniNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ServerError(f"no Patroni node {name!r} (nodes: {[n.name for n in self.nodes]})")

    def log_of(self, name: str) -> Path:
        return Path(self.base) / "logs" / self.scope / f"{name}.log"

    def database_url(self) -> str:
        """The libpq multi-host URL: libpq tries each node and keeps the one that writes."""
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return (
            f"postgresql+psycopg://jobrelay:jobrelay@{hosts}/jobrelay"
            "?target_session_attrs=read-write"
        )


# --- cluster.json -------------------------------------------------------------------------------


def save_cluster(cluster: PatroniCluster) -> None:
    """cluster.json: the cluster's fields, and for each node its data dir, its Patroni config
    (what `patronictl -c` takes) and REST API URL spelled out for other tools."""
    data = asdict(cluster)
    data["etcd_url"] = cluster.etcd_url
    for described, node in zip(data["nodes"], cluster.nodes, strict=True):
        described.update(data_dir=node.data_dir, config=node.config, rest_url=node.rest_url)
    tmp = cluster.file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(cluster.file)


def load_cluster(path: Path | None = None) -> PatroniCluster:
    """The cluster that ``path`` (by default $JOBRELAY_PATRONI_CLUSTER) describes."""
    if path is None:
        configured = os.environ.get(CLUSTER_ENV)
        if not configured:
            raise ServerError(f"{CLUSTER_ENV} is not set (scripts/servers.py run --postgres-ha)")
        path = Path(configured)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ServerError(f"no Patroni cluster described in {path}: {exc}") from None
    nodes = [PatroniNode(**_known(PatroniNode, node)) for node in data.pop("nodes")]
    return PatroniCluster(**_known(PatroniCluster, data), nodes=nodes)


def _known(kind: type, data: dict[str, object]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``kind``."""
    names = {f.name for f in fields(kind)} - {"nodes"}
    return {key: value for key, value in data.items() if key in names}


# --- configuration ------------------------------------------------------------------------------


def new_cluster(lay: Layout, *, synchronous: bool) -> PatroniCluster:
    ports = iter(free_ports(2 + 2 * NODES))
    client, peer = next(ports), next(ports)
    cluster = PatroniCluster(f"jobrelay-{client}", synchronous, client, peer, str(lay.base))
    for number in range(1, NODES + 1):
        name = f"node{number}"
        cluster.nodes.append(PatroniNode(name, next(ports), next(ports), str(cluster.root / name)))
    return cluster


def patroni_config(cluster: PatroniCluster, node: PatroniNode) -> dict[str, object]:
    """One node's Patroni configuration (YAML is a superset of JSON: written as JSON)."""
    parameters = {
        "max_connections": 300,
        "wal_level": "replica",
        "hot_standby": "on",
        "wal_log_hints": "on",  # pg_rewind: a failed primary rejoins as a standby
        "max_wal_senders": 10,
        "max_replication_slots": 10,
        "wal_keep_size": "256MB",
        "synchronous_commit": "on",
        "fsync": "on",
    }
    return {
        "scope": cluster.scope,
        "name": node.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": f"127.0.0.1:{node.rest_port}",
            "connect_address": f"127.0.0.1:{node.rest_port}",
        },
        "etcd3": {"hosts": [f"127.0.0.1:{cluster.etcd_client_port}"]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": cluster.synchronous,
                # A crashed primary fails over (to the synchronous standby) rather than being
                # restarted in place: every SIGKILL of the chaos profile is a failover.
                "primary_start_timeout": 0,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "remove_data_directory_on_rewind_failure": True,
                    "parameters": parameters,
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": f"127.0.0.1:{node.pg_port}",
            "data_dir": node.data_dir,
            "bin_dir": str(pg_bindir()),
            "pgpass": str(Path(node.dir) / "pgpass"),
            # A standby is cloned at once (a spread checkpoint takes minutes on an idle server).
            "basebackup": [{"checkpoint": "fast"}],
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "replicator", "password": "replicator"},
            },
            "parameters": {"unix_socket_directories": str(Path(node.dir) / "sock")},
            # Loopback only, trusted as the single throwaway server is.
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 trust",
                "host replication all 127.0.0.1/32 trust",
            ],
        },
    }


def write_node(cluster: PatroniCluster, node: PatroniNode) -> None:
    directory = Path(node.dir)
    (directory / "sock").mkdir(parents=True, mode=0o700, exist_ok=True)
    directory.chmod(0o700)
    Path(node.config).write_text(json.dumps(patroni_config(cluster, node), indent=2) + "\n")
    give_to_pg_user(directory, directory / "sock", Path(node.config))


# --- processes ----------------------------------------------------------------------------------


def pids_with(needle: str, comm_prefix: str = "") -> list[int]:
    """Live processes whose command line contains ``needle`` (and whose name starts with
    ``comm_prefix``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (proc / "comm").read_text().strip()
            if needle in cmdline and comm.startswith(comm_prefix) and pid_alive(int(proc.name)):
                found.append(int(proc.name))
    return found


def patroni_pids(node: PatroniNode) -> list[int]:
    """The Patroni daemon of ``node`` (a python3 running /usr/bin/patroni <config>)."""
    return [pid for pid in pids_with(node.config) if "patronictl" not in _cmdline(pid)]


def postmaster_pid(node: PatroniNode) -> int:
    """The node's postmaster, from its pid file, or 0."""
    try:
        pid = int((Path(node.data_dir) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pid if pid_alive(pid) and node.data_dir in _cmdline(pid) else 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def spawn_detached(cmd: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """A daemon of ours: its own session (a Ctrl-C meant for CMD does not reach it), its
    output appended to ``log_path``; nobody waits for it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_etcd(cluster: PatroniCluster) -> None:
    data = cluster.root / "etcd"
    data.mkdir(parents=True, exist_ok=True)
    peer = f"http://127.0.0.1:{cluster.etcd_peer_port}"
    cmd = [
        "etcd",
        "--name=jobrelay",
        f"--data-dir={data}",
        f"--listen-client-urls={cluster.etcd_url}",
        f"--advertise-client-urls={cluster.etcd_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=jobrelay={peer}",
        f"--initial-cluster-token={cluster.scope}",
    ]
    ensure_package(Path(shutil.which("etcd") or "/usr/bin/etcd"), "etcd-server")
    log_path = cluster.log_of("etcd")
    etcd = spawn_detached(cmd, log_path, cluster.root)
    wait_until(
        lambda: _http_json(f"{cluster.etcd_url}/health") is not None,
        START_TIMEOUT,
        "etcd",
        [log_path],
        alive=lambda: etcd.poll() is None,
    )


def start_node(cluster: PatroniCluster, node: PatroniNode) -> None:
    """Launch the node's Patroni (nothing to do if it runs, or if its REST port still
    answers: two Patroni daemons must never share a data directory); it starts PostgreSQL."""
    if patroni_pids(node) or port_open(node.rest_port):
        return
    ensure_package(Path(shutil.which("patroni") or "/usr/bin/patroni"), "patroni")
    log_path = cluster.log_of(f"patroni-{node.name}")
    spawn_detached(as_pg_user(["patroni", node.config]), log_path, cluster.root)


# --- the REST API -------------------------------------------------------------------------------


def _http_json(url: str, method: str = "GET") -> object | None:
    """The JSON a 2xx answer carries, or None when the server does not answer 2xx."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            found: object = json.loads(response.read() or b"null")
            return found
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors
        return None


def members(cluster: PatroniCluster) -> list[dict[str, object]]:
    """The members as the first node that answers sees them (GET /cluster), or []."""
    for node in cluster.nodes:
        seen = _http_json(f"{node.rest_url}/cluster")
        if isinstance(seen, dict) and isinstance(seen.get("members"), list):
            return [m for m in seen["members"] if isinstance(m, dict)]
    return []


def leader(cluster: PatroniCluster) -> PatroniNode | None:
    """The node whose REST API says it is the writable primary (GET /primary is 200)."""
    for node in cluster.nodes:
        if _http_json(f"{node.rest_url}/primary") is not None:
            return node
    return None


def healthy(cluster: PatroniCluster) -> bool:
    """The DCS and the REST API agree on one leader, and its own pg_stat_replication shows
    every other node streaming from it (the synchronous standby in synchronous mode). The REST
    API alone is not enough: a node that is about to shut down for pg_rewind still says it is a
    running replica."""
    primary = leader(cluster)
    seen = members(cluster)
    leaders = [m.get("name") for m in seen if m.get("role") == "leader"]
    if primary is None or leaders != [primary.name]:
        return False
    # In synchronous mode the DCS must name the standby too (its /sync key, which GET /cluster
    # shows as the role sync_standby): only that node may be promoted. PostgreSQL may already
    # stream to it synchronously while the key still names the old arrangement, and a primary
    # lost in that moment leaves no node that may take over (seen: writes stopped for three
    # minutes, until the old primary came back).
    if cluster.synchronous and not any(m.get("role") == "sync_standby" for m in seen):
        return False
    sync = " AND sync_state = 'sync'" if cluster.synchronous else ""
    query = f"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'{sync}"
    done = run([*_psql(primary), "-tA", "-c", query], check=False, timeout=10)
    streaming = int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else 0
    return streaming >= (1 if cluster.synchronous else len(cluster.nodes) - 1)


def wait_healthy(cluster: PatroniCluster, timeout: float = HEALTHY_TIMEOUT) -> float:
    """Seconds until the cluster is healthy, and still is one Patroni loop later (a
    transition can look whole for a moment); ServerError with the logs' tails after
    ``timeout``."""
    began = time.monotonic()
    logs = [cluster.log_of(f"patroni-{node.name}") for node in cluster.nodes]
    wait_until(
        lambda: healthy(cluster) and _still(lambda: healthy(cluster), LOOP_WAIT),
        timeout,
        "the Patroni cluster",
        logs,
    )
    return time.monotonic() - began


def _still(check: Callable[[], bool], after: float) -> bool:
    time.sleep(after)
    return check()


def wait_leader(
    cluster: PatroniCluster, timeout: float = HEALTHY_TIMEOUT, *, other_than: str | None = None
) -> float:
    """Seconds until some node (another than ``other_than``) is the writable primary."""
    began = time.monotonic()
    logs = [cluster.log_of(f"patroni-{node.name}") for node in cluster.nodes]

    def elected() -> bool:
        node = leader(cluster)
        return node is not None and node.name != other_than

    wait_until(elected, timeout, "a new Patroni leader" if other_than else "a leader", logs)
    return time.monotonic() - began


# --- up and down --------------------------------------------------------------------------------


def _psql(node: PatroniNode) -> list[str]:
    """psql on the node's `postgres` database as the `postgres` superuser, over TCP."""
    return [
        *[str(pg_bindir() / "psql"), "-h", "127.0.0.1", "-p", str(node.pg_port)],
        *["-U", "postgres", "-d", "postgres", "-X", "-q", "-v", "ON_ERROR_STOP=1"],
    ]


def bootstrap_jobrelay(cluster: PatroniCluster, node: PatroniNode) -> None:
    """The jobrelay role and database, as the single throwaway server has them."""
    psql = _psql(node)
    run([*psql, "-c", "CREATE ROLE jobrelay LOGIN SUPERUSER PASSWORD 'jobrelay'"])
    run([*psql, "-c", "CREATE DATABASE jobrelay OWNER jobrelay"])


def patroni_up(lay: Layout | None = None, *, synchronous: bool = True) -> PatroniCluster:
    """A new cluster in the servers dir: etcd, node1 as the primary, node2 cloned from it;
    returned once a standby (the synchronous one in synchronous mode) follows the primary.
    Stop it with patroni_down; a failed start cleans up after itself."""
    cluster = new_cluster(lay or layout(), synchronous=synchronous)
    cluster.root.mkdir(parents=True)
    give_to_pg_user(cluster.root.parent, cluster.root)  # Patroni (postgres) writes under it
    save_cluster(cluster)
    try:
        _start_cluster(cluster)
    except BaseException:
        patroni_down(cluster)
        raise
    return cluster


def cluster_env(cluster: PatroniCluster) -> dict[str, str]:
    """The variables that point jobrelay (and the chaos faults) at the cluster."""
    return {"JOBRELAY_DATABASE_URL": cluster.database_url(), CLUSTER_ENV: str(cluster.file)}


def _start_cluster(cluster: PatroniCluster) -> None:
    mode = "synchronous" if cluster.synchronous else "asynchronous"
    ports = ", ".join(f"{n.name} {n.pg_port} (REST {n.rest_port})" for n in cluster.nodes)
    log(f"starting etcd on {cluster.etcd_url} and Patroni, {mode} standby: {ports}")
    t0 = time.monotonic()
    start_etcd(cluster)
    for node in cluster.nodes:
        write_node(cluster, node)
    first, *others = cluster.nodes
    start_node(cluster, first)
    wait_leader(cluster, START_TIMEOUT)
    bootstrap_jobrelay(cluster, first)
    for node in others:
        start_node(cluster, node)
    wait_healthy(cluster, START_TIMEOUT)
    log(f"Patroni cluster {cluster.scope} ready in {time.monotonic() - t0:.1f}s")


def patroni_down(cluster: PatroniCluster) -> None:
    """Stop the nodes (Patroni stops its PostgreSQL), then etcd, and delete their data."""
    root = cluster.root
    for node in cluster.nodes:
        kill_and_wait(patroni_pids(node), timeout=STOP_TIMEOUT)
    # Whatever is left of PostgreSQL (a postmaster Patroni lost track of, orphaned backends).
    kill_and_wait(pids_with(str(root) + "/", "postgres"), timeout=5, first=signal.SIGQUIT)
    kill_and_wait(pids_with(f"--data-dir={root / 'etcd'}", "etcd"), timeout=10)
    shutil.rmtree(root, ignore_errors=True)


def patroni_down_all(lay: Layout) -> None:
    """Every cluster of the servers dir down (`servers.py down`): what a `run --postgres-ha`
    that was killed left behind."""
    for described in sorted((lay.base / "patroni").glob("*/cluster.json")):
        with contextlib.suppress(ServerError):
            patroni_down(load_cluster(described))


# --- primary faults (chaos profile pg-failover) ---------------------------------------------------


def _current_leader(cluster: PatroniCluster) -> PatroniNode:
    node = leader(cluster)
    if node is None:
        raise ServerError("the Patroni cluster has no leader")
    return node


def kill_primary_postmaster(cluster: PatroniCluster) -> str:
    """SIGKILL the primary's postmaster (a crash); returns the node's name."""
    node = _current_leader(cluster)
    pid = postmaster_pid(node)
    if not pid:
        raise ServerError(f"{node.name} is the leader but runs no postmaster")
    os.kill(pid, signal.SIGKILL)
    return node.name


def stop_primary_patroni(cluster: PatroniCluster) -> str:
    """SIGTERM the primary's Patroni and wait until it has exited (it stops its PostgreSQL and
    gives up the leader key); returns the node's name. Start it again with start_patroni."""
    node = _current_leader(cluster)
    pids = patroni_pids(node)
    if not pids:
        raise ServerError(f"{node.name} is the leader but its Patroni is not running")
    kill_and_wait(pids, timeout=STOP_TIMEOUT)
    return node.name


def start_patroni(cluster: PatroniCluster, name: str) -> None:
    start_node(cluster, cluster.node(name))


def switchover(cluster: PatroniCluster) -> str:
    """`patronictl switchover --force` from the current primary to the (synchronous) standby;
    returns the old primary's name."""
    node = _current_leader(cluster)
    cmd = ["patronictl", "-c", node.config, "switchover", "--force", "--leader", node.name]
    run(cmd, timeout=90, cwd=cluster.root)
    return node.name


def heal(cluster: PatroniCluster, timeout: float = HEALTHY_TIMEOUT) -> float:
    """Every node's Patroni running, then wait until the cluster is healthy; seconds waited."""
    for node in cluster.nodes:
        start_node(cluster, node)
    return wait_healthy(cluster, timeout)


PRIMARY_FAULTS: dict[str, Callable[[PatroniCluster], str]] = {
    "kill_postmaster": kill_primary_postmaster,
    "stop_patroni": stop_primary_patroni,
    "switchover": switchover,
}
