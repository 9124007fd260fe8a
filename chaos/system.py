"""The system under test: servers, a scratch database and vhost, and the services as processes.

Servers come from the environment (``JOBRELAY_DATABASE_URL``, ``JOBRELAY_AMQP_URL``,
``JOBRELAY_RABBITMQ_API_URL`` and ``JOBRELAY_SERVERS_DIR``, as ``scripts/servers.py`` exports
them); without them, ``scripts/servers.py`` starts throwaway ones for the run. Everything the
test suite already does (servers, vhosts, databases, processes) comes from ``tests.support``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import signal
import subprocess
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.support.databases import admin_execute, drop_database, with_database
from tests.support.processes import spawn
from tests.support.servers import (
    Servers,
    create_vhost,
    delete_vhost,
    from_environment,
    from_servers_script,
    servers_script,
    vhost_amqp_url,
)


def patroni() -> ModuleType:
    """scripts/localservers/patroni.py: the Patroni cluster and its primary faults."""
    servers_script()  # puts scripts/ on sys.path
    return importlib.import_module("localservers.patroni")


def with_patroni(servers: Servers, *, synchronous: bool | None) -> tuple[Servers, Any]:
    """``servers`` with PostgreSQL under Patroni: the cluster of the environment
    ($JOBRELAY_PATRONI_CLUSTER, from ``scripts/servers.py run --postgres-ha[-async]``), else a new
    one in the servers dir, deleted by ``Servers.close()``; its standby ``synchronous`` (None:
    the environment's cluster as it is, a synchronous one when starting one). Returns them and
    the cluster (``localservers.patroni.PatroniCluster``)."""
    module = patroni()
    if os.environ.get(module.CLUSTER_ENV):
        cluster = module.load_cluster()
        if synchronous is not None and cluster.synchronous != synchronous:
            raise RuntimeError(
                f"the Patroni cluster of {module.CLUSTER_ENV} has a "
                f"{'synchronous' if cluster.synchronous else 'asynchronous'} standby; "
                "this run asks for the other kind"
            )
        return dataclasses.replace(servers, database_url=cluster.database_url()), cluster
    cluster = module.patroni_up(synchronous=synchronous is not False)
    os.environ.update(module.cluster_env(cluster))
    return dataclasses.replace(
        servers,
        database_url=cluster.database_url(),
        on_close=(lambda: module.patroni_down(cluster), *servers.on_close),
    ), cluster


def find_or_start_servers(*, rabbitmq_nodes: int = 1, netns: bool = False) -> Servers:
    """The servers of the environment when ``scripts/servers.py`` runs them (the faults need
    its helpers); else throwaway ones (a RabbitMQ cluster of ``rabbitmq_nodes``, in network
    namespaces if ``netns``), stopped by ``Servers.close()``."""
    found = from_environment()
    if found is not None and found.servers_dir:
        return found
    print("chaos: no servers in the environment; starting throwaway ones", flush=True)
    os.environ["JOBRELAY_RABBITMQ_NODES"] = str(rabbitmq_nodes)
    if netns:
        os.environ["JOBRELAY_RABBITMQ_NETNS"] = "1"
    return from_servers_script()


# --- URLs ---------------------------------------------------------------------------------------


def amqp_nodes(amqp_url: str) -> list[str]:
    """The URL of each node of ``JOBRELAY_AMQP_URL`` (one, or a cluster's comma-separated list)."""
    return [url.strip() for url in amqp_url.split(",") if url.strip()]


def host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def database_hosts(url: str) -> list[tuple[str, int]]:
    """The ``host:port`` of each server of a database URL: one, or a libpq multi-host URL's
    (``…@h1:p1,h2:p2/db``, a Patroni cluster's)."""
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    hosts = []
    for entry in netloc.split(","):
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
        hosts.append((host or "127.0.0.1", int(port) if port else 5432))
    return hosts


def with_hosts(url: str, hosts: list[tuple[str, int]]) -> str:
    """``url`` pointed at ``hosts`` (a multi-host URL for several; credentials, path and query
    kept)."""
    parts = urllib.parse.urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    servers = ",".join(f"{host}:{port}" for host, port in hosts)
    netloc = f"{credentials}@{servers}" if credentials else servers
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def with_netloc(url: str, host: str, port: int) -> str:
    """``url`` pointed at ``host:port`` (credentials, path and query kept)."""
    return with_hosts(url, [(host, port)])


# --- scratch database and vhost -----------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    """A database and a vhost for one run, created here and dropped at the end."""

    admin_url: str
    api_url: str
    database: str
    vhost: str
    database_url: str  # direct, for the checks
    amqp_url: str  # direct, for the checks

    @classmethod
    def create(cls, servers: Servers, name: str) -> Scratch:
        database = f"jobrelay_{name}"
        admin_execute(servers.database_url, f'CREATE DATABASE "{database}"')
        vhost = f"jobrelay-{name}"
        create_vhost(servers.rabbitmq_api_url, vhost)
        return cls(
            servers.database_url,
            servers.rabbitmq_api_url,
            database,
            vhost,
            with_database(servers.database_url, database),
            vhost_amqp_url(servers.amqp_url, vhost),
        )

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            drop_database(self.admin_url, self.database_url)
        delete_vhost(self.api_url, self.vhost)


# --- services as processes ----------------------------------------------------------------------


class Service:
    """One service process, restartable; its output appends to one log file across restarts."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.expected_exit = False
        self.unexpected_exits: list[int] = []

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = spawn(self.args, self.env, log)
        self.paused = False
        self.expected_exit = False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash wherever the process is."""
        self.expected_exit = True
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.paused = False

    def pause(self) -> None:
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def check(self) -> bool:
        """False (and noted) when the process ended without our doing."""
        if self.process is None or self.alive() or self.expected_exit:
            return True
        self.unexpected_exits.append(int(self.process.returncode))
        self.expected_exit = True
        return False

    def stop(self, timeout: float = 15) -> None:
        if self.process is None:
            return
        self.resume()
        self.expected_exit = True
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def run_name() -> str:
    return f"chaos_{uuid.uuid4().hex[:10]}"
