"""The PostgreSQL cluster under <base>/pg: initdb, start, bootstrap, stop, and its fault helpers."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from .common import (
    Layout,
    ServerError,
    State,
    ensure_package,
    kill_and_wait,
    layout,
    locked,
    log,
    log_tails,
    pid_alive,
    processes_of,
    require_state,
    run,
    wait_until,
)

PG_OS_USER = "postgres"
PG_READY_TIMEOUT = 60.0


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


def pg_client(tool: str, host: str, state: State) -> list[str]:
    """A client tool (pg_isready, psql) aimed at our cluster's `postgres` database as the
    `postgres` superuser; `host` is 127.0.0.1 or the socket directory."""
    port = str(state.pg_port)
    return [str(pg_bindir() / tool), "-h", host, "-p", port, "-U", "postgres", "-d", "postgres"]


def pg_ctl(lay: Layout, action: str, *args: str) -> list[str]:
    """`pg_ctl ACTION -D <data> ARGS -w` as the postgres OS user (waits for the outcome)."""
    return as_pg_user([str(pg_bindir() / "pg_ctl"), action, "-D", str(lay.pg_data), *args, "-w"])


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
    # The pid file may be stale and its pid reused by another process: check it is ours.
    return pid if str(lay.pg_data) in cmdline and pid_alive(pid) else 0


def pg_ready(lay: Layout, state: State) -> bool:
    cmd = [*pg_client("pg_isready", "127.0.0.1", state), "-q", "-t", "2"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True)
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
    initdb = [str(pg_bindir() / "initdb"), "-D", str(lay.pg_data), "-U", "postgres"]
    options = ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"]
    run(as_pg_user([*initdb, *options]), cwd=lay.base)


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
    # More server options for one run, e.g. "-c shared_preload_libraries=pg_stat_statements"
    # to profile the statements (docs/testing.md).
    extra = os.environ.get("JOBRELAY_PG_OPTIONS", "").strip()
    if extra:
        options = f"{options} {extra}"
    timeout = str(int(PG_READY_TIMEOUT))
    cmd = pg_ctl(lay, "start", "-l", str(lay.pg_log), "-t", timeout, "-o", options)
    if not _started(cmd, lay.base):
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


def _started(pg_ctl_start: list[str], cwd: Path) -> bool:
    """Run `pg_ctl start`; whether it reported the postmaster started."""
    try:
        # Own session: a Ctrl-C in the terminal must not reach the postmaster.
        proc = subprocess.run(
            pg_ctl_start,
            cwd=cwd,
            text=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            timeout=PG_READY_TIMEOUT + 10,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def pg_bootstrap(lay: Layout, state: State) -> None:
    """Create the jobrelay superuser role and database (fresh cluster only)."""
    psql = [*pg_client("psql", str(lay.pg_socket), state), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
    run([*psql, "-c", "CREATE ROLE jobrelay LOGIN SUPERUSER PASSWORD 'jobrelay'"])
    run([*psql, "-c", "CREATE DATABASE jobrelay OWNER jobrelay"])
    lay.pg_bootstrapped.touch()


def pg_halt(lay: Layout, mode: str) -> None:
    """pg_ctl stop -m <mode>; kill the postmaster if pg_ctl cannot."""
    pid = pg_running(lay)
    if not pid:
        return
    cmd = pg_ctl(lay, "stop", "-m", mode, "-t", "30")
    proc = run(cmd, check=False, cwd=lay.base, timeout=40)
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


def pg_status(lay: Layout, state: State) -> str:
    pid = pg_running(lay)
    if pid and pg_ready(lay, state):
        return f"running (pid {pid}) on 127.0.0.1:{state.pg_port}"
    return f"{'starting/unready' if pid else 'stopped'} (port {state.pg_port})"


# --- fault helpers (tests, chaos) ---------------------------------------------------------------


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
