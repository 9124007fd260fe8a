"""What both servers share: the directory layout, the state file, ports and process helpers.

Stdlib only: ``scripts/servers.py`` must run before any virtual environment exists (CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Ports we never hand out: system PostgreSQL/RabbitMQ/epmd and the rabbitmqctl CLI range.
RESERVED_PORTS = {4369, 5432, 5672, 15672, 25672, *range(35672, 35683)}
PORT_ENV = {
    "pg": "JOBRELAY_PG_PORT",
    "amqp": "JOBRELAY_AMQP_PORT",
    "mgmt": "JOBRELAY_RABBITMQ_MGMT_PORT",
    "dist": "JOBRELAY_RABBITMQ_DIST_PORT",
}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ServerError(Exception):
    """An expected failure; the CLI prints it as one line and exits 1."""


class Interrupted(Exception):
    """SIGINT/SIGTERM/SIGHUP received while we were working (CLI only)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


def raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def log(msg: str) -> None:
    # stderr: stdout carries the `export` lines that `eval "$(servers.py up)"` reads.
    print(f"servers: {msg}", file=sys.stderr, flush=True)


# --- layout and state ---------------------------------------------------------------------------


class Layout:
    """All paths used under one base directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.lock = base / ".lock"
        self.state = base / "state.json"
        self.env = base / "env"
        self.logs = base / "logs"  # kept by `down`
        self.pg_log = self.logs / "postgres.log"
        self.rabbit_log_base = self.logs / "rabbitmq"
        self.rabbit_stdout = self.logs / "rabbitmq-stdout.log"
        self.pg = base / "pg"
        self.pg_data = self.pg / "data"
        self.pg_bootstrapped = self.pg / "bootstrapped"
        self.pg_socket = self.pg / "sock"
        if len(str(self.pg_socket)) > 80:  # Unix socket paths are limited to ~107 bytes
            digest = hashlib.sha1(str(base).encode()).hexdigest()[:12]
            self.pg_socket = Path(tempfile.gettempdir()) / f"jobrelay-pg-{digest}"
        self.rabbit = base / "rabbitmq"
        self.rabbit_home = self.rabbit / "home"
        self.rabbit_mnesia = self.rabbit / "mnesia"
        self.rabbit_pid = self.rabbit / "rabbitmq.pid"


@dataclass
class State:
    """What `up` decided; persisted in <base>/state.json."""

    pg_port: int
    amqp_port: int
    mgmt_port: int
    dist_port: int
    epmd_started_by_us: bool = False
    # The other nodes of a RabbitMQ cluster (`up --rabbitmq-nodes N`), node 2 first: each one's
    # [amqp, management, distribution] ports. Empty for the single node.
    cluster_ports: list[list[int]] = field(default_factory=list)
    # The nodes in network namespaces, each on its own address (`up --rabbitmq-netns`, netns.py).
    rabbit_netns: bool = False

    @property
    def node(self) -> str:
        """The name of RabbitMQ node 1 (the only one, unless a cluster was asked for)."""
        return node_name(self.amqp_port)

    @property
    def rabbit_nodes(self) -> int:
        return 1 + len(self.cluster_ports)

    def ports(self) -> list[int]:
        """Every port handed out to these servers."""
        taken = [self.pg_port, self.amqp_port, self.mgmt_port, self.dist_port]
        return taken + [port for ports in self.cluster_ports for port in ports]


def node_name(amqp_port: int) -> str:
    """A RabbitMQ node's name, from its AMQP port: unique on this machine (nodes of every
    servers directory register in the one epmd), and stable with its data."""
    return f"jobrelay-{amqp_port}@localhost"


def base_dir() -> Path:
    """The servers directory: $JOBRELAY_SERVERS_DIR or <repo>/.local/servers."""
    configured = os.environ.get("JOBRELAY_SERVERS_DIR")
    return Path(configured).resolve() if configured else REPO / ".local" / "servers"


def layout() -> Layout:
    return Layout(base_dir())


def load_state(lay: Layout) -> State | None:
    try:
        data = json.loads(lay.state.read_text())
        return State(**{f.name: data[f.name] for f in fields(State) if f.name in data})
    except (FileNotFoundError, ValueError, TypeError):
        return None


def save_state(lay: Layout, state: State) -> None:
    tmp = lay.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(lay.state)  # atomic: a reader never sees half a file


def require_state(lay: Layout) -> State:
    state = load_state(lay)
    if state is None:
        raise ServerError(f"servers are not set up in {lay.base} (run: scripts/servers.py up)")
    return state


@contextlib.contextmanager
def locked(lay: Layout) -> Iterator[None]:
    """Serialize up/down/fault operations on one base directory across processes."""
    lay.base.mkdir(parents=True, exist_ok=True)
    with open(lay.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --- ports --------------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """Distinct currently-free TCP ports on 127.0.0.1 (none of the well-known ones)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)  # held open until the end so that no port is handed out twice
            port = s.getsockname()[1]
            if port not in RESERVED_PORTS:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port (same SO_REUSEADDR as servers use)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --- processes ----------------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def run(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture output, raise ServerError (with its output) on failure."""
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=cwd,
            text=True,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise ServerError(f"command not found: {cmd[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"timed out after {timeout:.0f}s: {shlex.join(cmd)}") from exc
    if check and proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip()).replace("\n", " | ")
        raise ServerError(f"{shlex.join(cmd)} failed ({proc.returncode}): {output}")
    return proc


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:]) or f"({path} is empty)"


def log_tails(paths: list[Path]) -> str:
    return "".join(f"\n--- last lines of {p}:\n{tail(p)}" for p in paths if p.exists())


def wait_until(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    logs: list[Path],
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll `ready()` until true; fail with the log tails on timeout or if `alive()` is false."""
    deadline = time.monotonic() + timeout
    while not ready():
        if alive is not None and not alive():
            raise ServerError(f"{what} exited during startup{log_tails(logs)}")
        if time.monotonic() > deadline:
            raise ServerError(f"{what} not ready after {timeout:.0f}s{log_tails(logs)}")
        time.sleep(0.2)


def processes_of(lay: Layout) -> dict[int, str]:
    """Live processes belonging to servers of this base dir: {pid: short description}.

    PostgreSQL postmasters are recognised by `-D <base>/pg/data` on their command line,
    RabbitMQ processes (shell wrapper, beam, helpers, rabbitmqctl) by our
    RABBITMQ_MNESIA_BASE in their environment. epmd is shared and never listed.
    """
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # the process ended while we looked
            if desc := _server_process(lay, proc):
                found[int(proc.name)] = desc
    return {pid: desc for pid, desc in found.items() if pid_alive(pid)}


def _server_process(lay: Layout, proc: Path) -> str | None:
    """A description ("postgres ...", "rabbitmq ...") if /proc/<pid> is one of our servers."""
    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    comm = (proc / "comm").read_text().strip()
    if comm == "epmd":
        return None
    if str(lay.pg_data) in cmdline and "postgres" in comm:
        return f"postgres {cmdline[:60]}"
    rabbit_needle = f"RABBITMQ_MNESIA_BASE={lay.rabbit_mnesia}".encode()
    if rabbit_needle in (proc / "environ").read_bytes().split(b"\0"):
        return f"rabbitmq {comm}"
    return None


def kill_and_wait(
    pids: list[int], timeout: float = 10.0, first: signal.Signals = signal.SIGTERM
) -> None:
    """Send `first` (SIGTERM), then SIGKILL whatever is still alive after `timeout`."""
    for sig, wait in ((first, timeout), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [p for p in pids if pid_alive(p)]
        if not pids:
            return


def ensure_package(binary: Path | None, package: str) -> None:
    """apt-get install `package` if `binary` is missing and we are root."""
    if binary is not None and binary.exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServerError(f"{package} is not installed (install it with apt-get install {package})")
    log(f"installing {package} with apt-get (one-time)...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", package]
    if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
        # A stale package index is the usual cause: refresh it once and try again.
        subprocess.run(["apt-get", "update"], env=env, stdout=sys.stderr)
        if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
            raise ServerError(f"apt-get install {package} failed")
