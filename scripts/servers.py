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
They raise ServerError on expected failures.
"""

import argparse
import base64
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
PG_OS_USER = "postgres"
PG_READY_TIMEOUT = 60.0
RABBIT_READY_TIMEOUT = 90.0
EPMD_PORT = int(os.environ.get("ERL_EPMD_PORT", "4369"))
# Ports we never hand out: system PostgreSQL/RabbitMQ/epmd and the rabbitmqctl CLI range.
RESERVED_PORTS = {4369, 5432, 5672, 15672, 25672, *range(35672, 35683)}
PORT_ENV = {
    "pg": "JOBRELAY_PG_PORT",
    "amqp": "JOBRELAY_AMQP_PORT",
    "mgmt": "JOBRELAY_RABBITMQ_MGMT_PORT",
    "dist": "JOBRELAY_RABBITMQ_DIST_PORT",
}


class ServerError(Exception):
    """An expected failure; the CLI prints it as one line and exits 1."""


class Interrupted(Exception):
    """SIGINT/SIGTERM/SIGHUP received while we were working (CLI only)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


def raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


# --------------------------------------------------------------------------- layout


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

    @property
    def node(self) -> str:
        return f"jobrelay-{self.amqp_port}@localhost"


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
    tmp.replace(lay.state)


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


def log(msg: str) -> None:
    print(f"servers: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- helpers


def free_ports(count: int) -> list[int]:
    """Distinct currently-free TCP ports on 127.0.0.1 (none of the well-known ones)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
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


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:]) or f"({path} is empty)"


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


def log_tails(paths: list[Path]) -> str:
    return "".join(f"\n--- last lines of {p}:\n{tail(p)}" for p in paths if p.exists())


def processes_of(lay: Layout) -> dict[int, str]:
    """Live processes belonging to servers of this base dir: {pid: short description}.

    PostgreSQL postmasters are recognised by `-D <base>/pg/data` on their command line,
    RabbitMQ processes (shell wrapper, beam, helpers, rabbitmqctl) by our
    RABBITMQ_MNESIA_BASE in their environment. epmd is shared and never listed.
    """
    pg_needle = str(lay.pg_data)
    rabbit_needle = f"RABBITMQ_MNESIA_BASE={lay.rabbit_mnesia}".encode()
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (proc / "comm").read_text().strip()
            if comm == "epmd":
                continue
            if pg_needle in cmdline and "postgres" in comm:
                found[int(proc.name)] = f"postgres {cmdline[:60]}"
            elif rabbit_needle in (proc / "environ").read_bytes().split(b"\0"):
                found[int(proc.name)] = f"rabbitmq {comm}"
        except OSError:
            continue
    return {pid: desc for pid, desc in found.items() if pid_alive(pid)}


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
        subprocess.run(["apt-get", "update"], env=env, stdout=sys.stderr)
        if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
            raise ServerError(f"apt-get install {package} failed")


# --------------------------------------------------------------------------- PostgreSQL


def pg_bindir() -> Path:
    """PostgreSQL server binaries: $JOBRELAY_PG_BINDIR or newest /usr/lib/postgresql/*/bin."""
    if configured := os.environ.get("JOBRELAY_PG_BINDIR"):
        return Path(configured)
    for attempt in range(2):
        initdbs = glob.glob("/usr/lib/postgresql/*/bin/initdb")
        versions = [Path(p).parent.parent.name for p in initdbs]
        if versions:
            newest = max(versions, key=lambda v: int(v) if v.isdigit() else 0)
            return Path("/usr/lib/postgresql") / newest / "bin"
        if attempt == 0:
            ensure_package(None, "postgresql")
    raise ServerError(
        "PostgreSQL server binaries not found under /usr/lib/postgresql (set JOBRELAY_PG_BINDIR)"
    )


def as_pg_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: drop to the postgres OS user when we are root."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv"):  # plain exec, no PAM session, clean environment
        return [
            "setpriv",
            f"--reuid={PG_OS_USER}",
            f"--regid={PG_OS_USER}",
            "--init-groups",
            "--reset-env",
            *cmd,
        ]
    return ["runuser", "-u", PG_OS_USER, "--", *cmd]


def give_to_pg_user(*paths: Path) -> None:
    if os.geteuid() == 0:
        for path in paths:
            shutil.chown(path, PG_OS_USER, PG_OS_USER)


def pg_running(lay: Layout) -> int:
    """PID of this dir's postmaster, or 0."""
    try:
        pid = int((lay.pg_data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return 0
    return pid if str(lay.pg_data) in cmdline and pid_alive(pid) else 0


def pg_ready(lay: Layout, state: State) -> bool:
    proc = subprocess.run(
        [
            str(pg_bindir() / "pg_isready"),
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            str(state.pg_port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-t",
            "2",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    return proc.returncode == 0


def pg_initdb(lay: Layout) -> None:
    for path in (lay.pg, lay.pg_socket):
        shutil.rmtree(path, ignore_errors=True)
    lay.pg_data.mkdir(parents=True, mode=0o700)
    lay.pg_socket.mkdir(mode=0o700)
    give_to_pg_user(lay.pg, lay.pg_data, lay.pg_socket)
    if subprocess.run(as_pg_user(["test", "-w", str(lay.pg_data)]), cwd="/").returncode != 0:
        raise ServerError(
            f"the {PG_OS_USER} OS user cannot write {lay.pg_data}; every parent "
            "directory must be traversable (chmod o+x) or set JOBRELAY_SERVERS_DIR"
        )
    lay.logs.mkdir(parents=True, exist_ok=True)
    lay.pg_log.write_text("")
    run(
        as_pg_user(
            [
                str(pg_bindir() / "initdb"),
                "-D",
                str(lay.pg_data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ]
        ),
        cwd=lay.base,
    )


def pg_clear_stale_pidfile(lay: Layout) -> None:
    """Remove postmaster.pid and socket lock files left by a killed postmaster.

    PostgreSQL itself only checks kill(pid, 0), which also succeeds for an unreaped zombie
    (containers without a reaping init), and then refuses to start.
    """
    if pg_running(lay) or any(d.startswith("postgres") for d in processes_of(lay).values()):
        return
    (lay.pg_data / "postmaster.pid").unlink(missing_ok=True)
    for stale in lay.pg_socket.glob(".s.PGSQL.*"):
        stale.unlink(missing_ok=True)


def pg_launch(lay: Layout, state: State) -> None:
    """pg_ctl start on our port/socket dir and wait until it accepts TCP connections."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    lay.pg_log.touch()
    lay.pg_socket.mkdir(mode=0o700, exist_ok=True)  # may be in /tmp for long base paths
    give_to_pg_user(lay.pg_log, lay.pg_socket)
    pg_clear_stale_pidfile(lay)
    options = (
        f"-p {state.pg_port} -k {shlex.quote(str(lay.pg_socket))} "
        "-c listen_addresses=127.0.0.1 -c max_connections=300 "
        "-c synchronous_commit=on -c fsync=on"
    )
    cmd = as_pg_user(
        [
            str(pg_bindir() / "pg_ctl"),
            "start",
            "-D",
            str(lay.pg_data),
            "-l",
            str(lay.pg_log),
            "-w",
            "-t",
            str(int(PG_READY_TIMEOUT)),
            "-o",
            options,
        ]
    )
    # Own session: a Ctrl-C in the terminal must not reach the postmaster.
    try:
        proc = subprocess.run(
            cmd,
            cwd=lay.base,
            text=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            timeout=PG_READY_TIMEOUT + 10,
        )
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode != 0:
        raise ServerError(
            f"PostgreSQL failed to start on port {state.pg_port}{log_tails([lay.pg_log])}"
        )
    wait_until(
        lambda: pg_ready(lay, state),
        PG_READY_TIMEOUT,
        "PostgreSQL",
        [lay.pg_log],
        alive=lambda: pg_running(lay) > 0,
    )


def pg_bootstrap(lay: Layout, state: State) -> None:
    """Create the jobrelay superuser role and database (fresh cluster only)."""
    psql = [
        str(pg_bindir() / "psql"),
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        str(lay.pg_socket),
        "-p",
        str(state.pg_port),
        "-U",
        "postgres",
        "-d",
        "postgres",
    ]
    run([*psql, "-c", "CREATE ROLE jobrelay LOGIN SUPERUSER PASSWORD 'jobrelay'"])
    run([*psql, "-c", "CREATE DATABASE jobrelay OWNER jobrelay"])
    lay.pg_bootstrapped.touch()


def pg_halt(lay: Layout, mode: str) -> None:
    """pg_ctl stop -m <mode>; kill the postmaster if pg_ctl cannot."""
    pid = pg_running(lay)
    if not pid:
        return
    proc = run(
        as_pg_user(
            [
                str(pg_bindir() / "pg_ctl"),
                "stop",
                "-D",
                str(lay.pg_data),
                "-m",
                mode,
                "-w",
                "-t",
                "30",
            ]
        ),
        check=False,
        cwd=lay.base,
        timeout=40,
    )
    if proc.returncode != 0 or pid_alive(pid):
        log(f"pg_ctl stop failed, killing postmaster {pid}")
        kill_and_wait([pid], timeout=5, first=signal.SIGQUIT)


def pg_ensure(lay: Layout, state: State) -> None:
    """Bring PostgreSQL up: reuse a healthy/bootstrapped cluster, otherwise re-init."""
    if pg_running(lay) and pg_ready(lay, state):
        return
    pg_halt(lay, "immediate")  # stale or wrong port
    if lay.pg_bootstrapped.exists():
        try:
            pg_launch(lay, state)
            return
        except ServerError as exc:
            log(f"existing cluster did not start, re-initialising: {str(exc).splitlines()[0]}")
            pg_halt(lay, "immediate")
    pg_initdb(lay)
    pg_launch(lay, state)
    pg_bootstrap(lay, state)


# --------------------------------------------------------------------------- RabbitMQ


def rabbit_env(lay: Layout, state: State) -> dict[str, str]:
    """Environment for rabbitmq-server and rabbitmqctl pointing at our private node."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    env.update(
        {
            "HOME": str(lay.rabbit_home),
            "RABBITMQ_NODENAME": state.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(state.amqp_port),
            "RABBITMQ_DIST_PORT": str(state.dist_port),
            "RABBITMQ_MNESIA_BASE": str(lay.rabbit_mnesia),
            "RABBITMQ_LOG_BASE": str(lay.rabbit_log_base),
            "RABBITMQ_PID_FILE": str(lay.rabbit_pid),
            "RABBITMQ_CONFIG_FILE": str(lay.rabbit / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(lay.rabbit / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(lay.rabbit / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(lay.rabbit / "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(EPMD_PORT),
        }
    )
    return env


def rabbit_write_config(lay: Layout, state: State) -> None:
    lay.rabbit_home.mkdir(parents=True, exist_ok=True)
    lay.rabbit_mnesia.mkdir(parents=True, exist_ok=True)
    lay.rabbit_log_base.mkdir(parents=True, exist_ok=True)
    cookie = lay.rabbit_home / ".erlang.cookie"
    if not cookie.exists():
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
    (lay.rabbit / "rabbitmq-env.conf").write_text("")
    (lay.rabbit / "enabled_plugins").write_text("[rabbitmq_management].\n")
    (lay.rabbit / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{state.amqp_port}\n"
        f"management.tcp.ip = 127.0.0.1\n"
        f"management.tcp.port = {state.mgmt_port}\n"
        "loopback_users.guest = true\n"
        "log.console = false\n"
        "log.file.level = info\n"
    )


def rabbit_pids(lay: Layout) -> list[int]:
    """Live processes of this dir's node (shell wrapper, beam.smp, helpers, rabbitmqctl)."""
    return [pid for pid, desc in processes_of(lay).items() if desc.startswith("rabbitmq")]


def rabbit_beam_pid(lay: Layout) -> int:
    try:
        pid = int(lay.rabbit_pid.read_text().strip())
    except (OSError, ValueError):
        return 0
    return pid if pid in rabbit_pids(lay) else 0


def mgmt_get(state: State, path: str, timeout: float = 2.0) -> Any:
    """GET the management API as guest; None if it does not answer with 200."""
    req = urllib.request.Request(f"http://127.0.0.1:{state.mgmt_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp) if resp.status == 200 else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def rabbit_ready(state: State) -> bool:
    if not port_open(state.amqp_port):
        return False
    overview = mgmt_get(state, "/api/overview")
    if not isinstance(overview, dict) or overview.get("node") != state.node:
        return False
    # Our node must really own the AMQP port (it could be someone else's listener).
    return any(
        listener.get("protocol") == "amqp" and listener.get("port") == state.amqp_port
        for listener in overview.get("listeners", [])
    )


def rabbit_launch(lay: Layout, state: State, *, fresh: bool = False) -> None:
    """Start rabbitmq-server detached in its own session (does not wait). Its queues and
    messages kept by an earlier `down` are used again, unless `fresh`."""
    if fresh:
        shutil.rmtree(lay.rabbit_mnesia, ignore_errors=True)
    rabbit_write_config(lay, state)
    lay.rabbit_pid.unlink(missing_ok=True)
    state.epmd_started_by_us = state.epmd_started_by_us or not port_open(EPMD_PORT)
    with open(lay.rabbit_stdout, "w") as out:
        # Own session: a Ctrl-C in the terminal must not reach the node.
        subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=rabbit_env(lay, state),
            cwd=lay.rabbit,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def rabbit_wait(lay: Layout, state: State) -> None:
    wait_until(
        lambda: rabbit_ready(state),
        RABBIT_READY_TIMEOUT,
        "RabbitMQ",
        [lay.rabbit_stdout, lay.rabbit_log_base / f"{state.node}.log"],
        alive=lambda: bool(rabbit_pids(lay)),
    )


def rabbit_halt(lay: Layout, state: State | None) -> None:
    """SIGKILL the node and its helpers: its data is throwaway, so no graceful stop needed.

    Processes are found by their environment (see processes_of), never by a remembered
    pid or process group that may have been reused since a crash.
    """
    kill_and_wait(rabbit_pids(lay), timeout=0, first=signal.SIGKILL)
    if state and state.epmd_started_by_us:
        epmd_stop_if_unused()


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


# --------------------------------------------------------------------------- env


def env_vars(lay: Layout, state: State) -> dict[str, str]:
    return {
        "JOBRELAY_DATABASE_URL": f"postgresql+psycopg://jobrelay:jobrelay@127.0.0.1:{state.pg_port}/jobrelay",
        "JOBRELAY_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{state.amqp_port}/",
        "JOBRELAY_RABBITMQ_API_URL": f"http://guest:guest@127.0.0.1:{state.mgmt_port}/",
        "JOBRELAY_SERVERS_DIR": str(lay.base),
        "JOBRELAY_RABBITMQ_NODE": state.node,
    }


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


# --------------------------------------------------------------------------- operations


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


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port (same SO_REUSEADDR as servers use)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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
        taken = {state.pg_port, state.amqp_port, state.mgmt_port, state.dist_port}
        setattr(state, f"{key}_port", next(p for p in free_ports(5) if p not in taken))


def start_all(lay: Layout) -> tuple[dict[str, str], bool]:
    """Ensure both servers run; returns (env, whether anything had to be started)."""
    previous = load_state(lay)
    ports, fixed = desired_ports(previous)
    state = State(
        pg_port=ports["pg"],
        amqp_port=ports["amqp"],
        mgmt_port=ports["mgmt"],
        dist_port=ports["dist"],
    )
    rabbit_ports = ("amqp_port", "mgmt_port", "dist_port")
    same_rabbit = previous is not None and all(
        getattr(previous, p) == getattr(state, p) for p in rabbit_ports
    )
    if previous is not None and same_rabbit:
        state.epmd_started_by_us = previous.epmd_started_by_us
    pg_ok = (
        previous is not None
        and previous.pg_port == state.pg_port
        and pg_running(lay) > 0
        and pg_ready(lay, state)
    )
    rabbit_ok = same_rabbit and bool(rabbit_pids(lay)) and rabbit_ready(state)
    if pg_ok and rabbit_ok:
        return env_vars(lay, state), False

    ensure_package(RABBITMQ_BIN / "rabbitmq-server", "rabbitmq-server")
    pg_bindir()  # installs PostgreSQL if missing
    lay.logs.mkdir(parents=True, exist_ok=True)
    # Stop stale/unhealthy servers of this dir first so that their ports become free.
    if not rabbit_ok:
        rabbit_halt(lay, previous)
        settle_ports(state, ["amqp", "mgmt", "dist"], fixed)
    if not pg_ok:
        pg_halt(lay, "immediate")
        settle_ports(state, ["pg"], fixed)
    kept_data = has_data(lay) or lay.rabbit_mnesia.exists()  # from an earlier `down`
    kept_rabbit = (lay.rabbit_mnesia / state.node).exists()
    try:
        if not rabbit_ok:
            # Start RabbitMQ first (slow boot) and bring PostgreSQL up while it boots.
            log(
                f"starting RabbitMQ node {state.node} (amqp {state.amqp_port}, "
                f"management {state.mgmt_port})" + (" with its kept data" if kept_rabbit else "")
            )
            rabbit_launch(lay, state)
        save_state(lay, state)
        if not pg_ok:
            log(f"starting PostgreSQL on 127.0.0.1:{state.pg_port}")
            pg_ensure(lay, state)
        if not rabbit_ok:
            try:
                rabbit_wait(lay, state)
            except ServerError as exc:
                if not kept_rabbit:
                    raise
                log(
                    "RabbitMQ did not start from its kept data, starting it afresh: "
                    f"{str(exc).splitlines()[0]}"
                )
                rabbit_halt(lay, state)
                rabbit_launch(lay, state, fresh=True)
                rabbit_wait(lay, state)
    except BaseException:
        # Do not leave half-started servers behind; the logs/ directory is kept, and so is the
        # data an earlier `down` kept.
        save_state(lay, state)
        stop_all(lay, delete_data=not kept_data)
        raise
    env = env_vars(lay, state)
    lay.env.write_text(format_exports(env))
    return env, True


def data_paths(lay: Layout) -> dict[str, Path]:
    """What `down --delete-data` deletes, by what it holds (only the paths that exist)."""
    paths = {
        "PostgreSQL data (databases, jobs, clients)": lay.pg,
        "RabbitMQ data (queues and their messages)": lay.rabbit,
    }
    return {what: path for what, path in paths.items() if path.exists()}


def has_data(lay: Layout) -> bool:
    return lay.pg_bootstrapped.exists()


def rabbit_stop(lay: Layout, state: State | None) -> None:
    """Stop the node cleanly (its queues are kept for the next start), then make sure."""
    if state is not None and rabbit_pids(lay):
        cmd = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", state.node, "stop"]
        run(cmd, env=rabbit_env(lay, state), timeout=60, check=False, cwd=lay.base)
    rabbit_halt(lay, state)


def stop_all(lay: Layout, *, delete_data: bool = True) -> bool:
    """Stop both servers of this base dir; delete their data only if `delete_data`.
    Returns whether anything ran."""
    state = load_state(lay)
    was_running = bool(processes_of(lay))
    pg_halt(lay, "fast")
    if delete_data:
        rabbit_halt(lay, state)  # its data goes anyway: no need to wait for a clean stop
    else:
        rabbit_stop(lay, state)
    leftovers = processes_of(lay)
    if leftovers:
        kill_and_wait(list(leftovers), timeout=3)
    lay.env.unlink(missing_ok=True)  # nothing runs: the export lines are stale
    if delete_data:
        for what, path in data_paths(lay).items():
            log(f"deleting {what}: {path}")
        for path in (lay.pg, lay.pg_socket, lay.rabbit):
            shutil.rmtree(path, ignore_errors=True)
        lay.state.unlink(missing_ok=True)
    # Kept: state.json (the ports, hence the RabbitMQ node name its data belongs to) and logs/.
    return was_running


def up() -> dict[str, str]:
    """Start both servers (idempotent) and return the JOBRELAY_* variables."""
    lay = layout()
    with locked(lay):
        return start_all(lay)[0]


def down(*, delete_data: bool = False) -> None:
    """Stop both servers, keeping their data for the next `up` unless `delete_data`."""
    lay = layout()
    with locked(lay):
        stop_all(lay, delete_data=delete_data)


def pg_stop() -> None:
    """Crash-like stop of PostgreSQL (pg_ctl stop -m immediate)."""
    lay = layout()
    with locked(lay):
        require_state(lay)
        pg_halt(lay, "immediate")


def pg_start() -> None:
    """Start the (stopped) PostgreSQL again and wait until it accepts connections."""
    lay = layout()
    with locked(lay):
        state = require_state(lay)
        if not lay.pg_bootstrapped.exists():
            raise ServerError(f"no PostgreSQL cluster in {lay.pg_data} (run: servers.py up)")
        if not (pg_running(lay) and pg_ready(lay, state)):
            pg_launch(lay, state)


def pg_restart() -> None:
    """Immediate stop + start of PostgreSQL, waiting for readiness."""
    pg_stop()
    pg_start()


def rabbitmqctl(*args: str, timeout: float = 120) -> str:
    """Run rabbitmqctl against our node; returns stdout, raises ServerError on failure."""
    lay = layout()
    state = require_state(lay)
    cmd = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", state.node, *args]
    return run(cmd, env=rabbit_env(lay, state), timeout=timeout, cwd=lay.base).stdout


def rabbit_restart_app() -> None:
    """rabbitmqctl stop_app + start_app, then wait until AMQP and the management API answer."""
    lay = layout()
    state = require_state(lay)
    rabbitmqctl("stop_app")
    rabbitmqctl("start_app")
    rabbit_wait(lay, state)


def status() -> dict[str, str]:
    """{"postgres": ..., "rabbitmq": ...} human-readable states."""
    lay = layout()
    state = load_state(lay)
    if state is None:
        stray = processes_of(lay)
        note = f" ({len(stray)} stray processes, run down)" if stray else ""
        return {"postgres": "not running" + note, "rabbitmq": "not running" + note}
    pg_pid = pg_running(lay)
    pg = (
        f"running (pid {pg_pid}) on 127.0.0.1:{state.pg_port}"
        if pg_pid and pg_ready(lay, state)
        else f"{'starting/unready' if pg_pid else 'stopped'} (port {state.pg_port})"
    )
    if rabbit_ready(state):
        rabbit = (
            f"running (node {state.node}, pid {rabbit_beam_pid(lay)}) amqp 127.0.0.1:"
            f"{state.amqp_port}, management 127.0.0.1:{state.mgmt_port}"
        )
    elif rabbit_pids(lay):
        rabbit = f"node {state.node} alive but not serving (app stopped or booting)"
    else:
        rabbit = f"stopped (node {state.node})"
    return {"postgres": pg, "rabbitmq": rabbit}


# --------------------------------------------------------------------------- CLI


def cmd_run(command: list[str], keep: bool) -> int:
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

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    started = False
    rc = 1
    kept_data = has_data(lay)  # an earlier `down` kept it: stop afterwards, but keep it
    try:
        with locked(lay):
            started = True  # if up fails half-way, still clean up
            env, started = start_all(lay)
        if not started:
            log("servers were already running; leaving them running afterwards")
        try:
            child = subprocess.Popen(command, env={**os.environ, **env})
        except OSError as exc:
            raise ServerError(f"cannot run {command[0]}: {exc.strerror}") from exc
        rc = child.wait()
        rc = 128 - rc if rc < 0 else rc
    except Interrupted as exc:
        rc = exc.exit_code
    finally:
        if started and not keep:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            with locked(lay):
                stop_all(lay, delete_data=not kept_data)
            log("stopped" + (f" (data kept in {lay.base})" if kept_data else ""))
    return rc


SIMPLE_COMMANDS = {
    "up": "start both servers (idempotent) and print export lines",
    "status": "show what is running (exit 1 unless both are up)",
    "env": "print the export lines of the running servers",
    "pg-stop": "immediate (crash-like) PostgreSQL stop",
    "pg-start": "start PostgreSQL again and wait until ready",
    "pg-restart": "pg-stop, then pg-start",
    "rabbit-restart-app": "rabbitmqctl stop_app + start_app, wait until ready",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/servers.py",
        description=__doc__.split("\n")[0],
        epilog="See the module docstring for details.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, text in SIMPLE_COMMANDS.items():
        sub.add_parser(name, help=text, description=text)
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
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p_ctl = sub.add_parser("rabbitmqctl", help="rabbitmqctl against our node")
    p_ctl.add_argument("args", nargs=argparse.REMAINDER, help="rabbitmqctl arguments")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupted)

    try:
        match args.cmd:
            case "up":
                t0 = time.monotonic()
                lay = layout()
                with locked(lay):
                    env, started = start_all(lay)
                log(
                    f"ready in {time.monotonic() - t0:.1f}s ({lay.env})"
                    if started
                    else f"already running ({lay.env})"
                )
                sys.stdout.write(format_exports(env))
            case "down":
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
            case "status":
                states = status()
                print(f"base: {base_dir()}")
                for name, text in states.items():
                    print(f"{name}: {text}")
                return 0 if all(t.startswith("running") for t in states.values()) else 1
            case "env":
                sys.stdout.write(format_exports(read_env()))
            case "run":
                command = args.command[1:] if args.command[:1] == ["--"] else args.command
                return cmd_run(command, args.keep)
            case "pg-stop":
                pg_stop()
            case "pg-start":
                pg_start()
            case "pg-restart":
                pg_restart()
            case "rabbit-restart-app":
                rabbit_restart_app()
            case "rabbitmqctl":
                ctl_args = args.args[1:] if args.args[:1] == ["--"] else args.args
                lay = layout()
                state = require_state(lay)
                cmd = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", state.node, *ctl_args]
                return subprocess.run(cmd, env=rabbit_env(lay, state), cwd=lay.base).returncode
    except ServerError as exc:
        print(f"servers: error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"servers: interrupted ({exc})", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
