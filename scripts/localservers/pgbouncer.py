"""A PgBouncer in transaction pooling mode in front of our PostgreSQL (`run --pgbouncer`).

Each `run --pgbouncer` starts its own PgBouncer in <base>/pgbouncer-<pid>, on a free loopback
port, and stops it when the command ends: two runs on one servers directory never share one.
It routes every database name (`*`) to our PostgreSQL, so the tests' fresh databases pass
through it too, and authenticates the `jobrelay` user with the password `pg_bootstrap` gave it.
Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from .common import (
    Layout,
    ServerError,
    State,
    ensure_package,
    free_ports,
    kill_and_wait,
    log,
    pid_alive,
    run,
    wait_until,
)
from .postgres import as_pg_user, give_to_pg_user, pg_bindir

PGBOUNCER_BIN = Path("/usr/sbin/pgbouncer")
READY_TIMEOUT = 20.0
# The integration tier opens a few hundred client connections at its peak (every test's pools,
# listeners and CLI processes); far fewer server connections are needed, which is the point.
MAX_CLIENT_CONN = 2000
DEFAULT_POOL_SIZE = 40
# PostgreSQL runs with max_connections=300: the pooler keeps well under it, leaving room for
# the direct connections (migrations' CREATE DATABASE, LISTEN, the tests' own).
MAX_DB_CONNECTIONS = 60
USER, PASSWORD = "jobrelay", "jobrelay"  # as postgres.pg_bootstrap creates it
ENV_DIRECT = "JOBRELAY_DIRECT_DATABASE_URL"


class PgBouncer:
    """One PgBouncer process of this run: its directory, port and pid."""

    def __init__(
        self, lay: Layout, pg_port: int, *, user: str = USER, password: str = PASSWORD
    ) -> None:
        """``user`` and ``password``: the server's superuser, by default ours; another for a
        PostgreSQL this script did not start (a test's container)."""
        self.dir = lay.base / f"pgbouncer-{os.getpid()}"
        self.pg_port = pg_port
        self.user, self.password = user, password
        self.port = next(p for p in free_ports(2) if p != pg_port)
        self.config = self.dir / "pgbouncer.ini"
        self.pidfile = self.dir / "pgbouncer.pid"
        self.logfile = self.dir / "pgbouncer.log"

    def start(self) -> None:
        ensure_package(PGBOUNCER_BIN, "pgbouncer")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        (self.dir / "userlist.txt").write_text(f'"{self.user}" "{self.password}"\n')
        self.config.write_text(self._config())
        self.logfile.touch()
        give_to_pg_user(self.dir, *self.dir.iterdir())
        log(f"starting PgBouncer (pool_mode=transaction) on 127.0.0.1:{self.port}")
        # PgBouncer refuses to run as root: as the postgres OS user, like the server.
        run(as_pg_user([str(PGBOUNCER_BIN), "-d", "-q", str(self.config)]), cwd=self.dir)
        wait_until(self._ready, READY_TIMEOUT, "PgBouncer", [self.logfile], alive=self._alive)

    def stop(self) -> None:
        pid = self._pid()
        if pid and pid_alive(pid):
            kill_and_wait([pid], timeout=5, first=signal.SIGTERM)  # SIGTERM: immediate shutdown
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self, direct: dict[str, str]) -> dict[str, str]:
        """The run's variables: jobrelay through PgBouncer, the direct URL kept beside."""
        direct_url = direct["JOBRELAY_DATABASE_URL"]
        return {
            **direct,
            "JOBRELAY_DATABASE_URL": direct_url.replace(
                f"127.0.0.1:{self.pg_port}/", f"127.0.0.1:{self.port}/"
            ),
            "JOBRELAY_DATABASE_POOL_MODE": "transaction",
            ENV_DIRECT: direct_url,
        }

    def _config(self) -> str:
        return f"""[databases]
* = host=127.0.0.1 port={self.pg_port}

[pgbouncer]
pool_mode = transaction
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {self.dir / "userlist.txt"}
; other roles (a test's own) are looked up in pg_shadow as jobrelay, a superuser
auth_user = {self.user}
max_client_conn = {MAX_CLIENT_CONN}
default_pool_size = {DEFAULT_POOL_SIZE}
max_db_connections = {MAX_DB_CONNECTIONS}
; the tests drop their databases: close idle server connections to them soon
server_idle_timeout = 10
; after a failed server login (PostgreSQL restarting) PgBouncer refuses its clients this long
; (15 s by default): the fault tests restart PostgreSQL and expect the services back at once
server_login_retry = 1
logfile = {self.logfile}
pidfile = {self.pidfile}
"""

    def _pid(self) -> int:
        try:
            return int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def _alive(self) -> bool:
        # -d forks: until the pid file appears, the daemon is still starting.
        return not self.pidfile.exists() or pid_alive(self._pid())

    def _ready(self) -> bool:
        probe = [str(pg_bindir() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        asked = [*probe, "-U", self.user, "-d", "jobrelay", "-q", "-t", "2"]
        return run(asked, check=False).returncode == 0


def started(
    lay: Layout, state: State | None, env: dict[str, str]
) -> tuple[PgBouncer, dict[str, str]]:
    """Start a PgBouncer in front of the running PostgreSQL; returns it and the run's env."""
    if state is None:
        raise ServerError("PostgreSQL is not running: no PgBouncer to put in front of it")
    bouncer = PgBouncer(lay, state.pg_port)
    try:
        bouncer.start()
    except BaseException:
        bouncer.stop()
        raise
    return bouncer, bouncer.env(env)


__all__ = ["ENV_DIRECT", "PgBouncer", "started"]
