"""Where the tests find their PostgreSQL and RabbitMQ.

``JOBRELAY_TEST_SERVERS`` chooses:

- ``local``: the URLs from the environment (``JOBRELAY_DATABASE_URL``, ``JOBRELAY_AMQP_URL``,
  ``JOBRELAY_RABBITMQ_API_URL``, as ``scripts/servers.py`` exports them; ``make test``);
- ``containers``: PostgreSQL and RabbitMQ (with its management API) in containers started by
  testcontainers for the session and removed at its end (``make test-containers``). Images:
  ``JOBRELAY_TEST_POSTGRES_IMAGE`` (``postgres:15``) and ``JOBRELAY_TEST_RABBITMQ_IMAGE``
  (``rabbitmq:3.10-management``); where no registry answers, ``make images`` builds stand-ins
  of those names. The fault helpers of ``tests/support/faults.py`` then act on the containers;
- unset: ``local`` when the URLs are set, else ``containers`` when a Docker engine answers.

With no servers the session fails with a message saying how to start them: tests never skip
for want of a server.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import dataclasses
import importlib
import json
import os
import secrets
import socket
import sys
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

HOW_TO_START = (
    "no test servers: run the tests with `make test` (it starts throwaway PostgreSQL and "
    "RabbitMQ via scripts/servers.py), or export JOBRELAY_DATABASE_URL, JOBRELAY_AMQP_URL and "
    "JOBRELAY_RABBITMQ_API_URL (management API) pointing at servers you run, or start a Docker "
    "engine and run with JOBRELAY_TEST_SERVERS=containers (`make test-containers`)"
)
MODES = ("local", "containers")
POSTGRES_IMAGE = "postgres:15"
RABBITMQ_IMAGE = "rabbitmq:3.10-management"


class NoServers(RuntimeError):
    pass


@dataclass(frozen=True)
class Servers:
    database_url: str  # an admin connection that may CREATE DATABASE
    amqp_url: str  # the default vhost; tests get their own vhost
    rabbitmq_api_url: str  # management HTTP API, with credentials
    servers_dir: str | None  # set when scripts/servers.py runs them (fault helpers need it)
    keepalive: tuple[Any, ...] = ()
    # What the fault helpers act on when the servers are not scripts/servers.py's: an object
    # with pg_stop, pg_start, pg_restart, rabbitmqctl and rabbit_restart_app.
    faults: Any = None
    on_close: tuple[Callable[[], None], ...] = field(default=(), compare=False)
    # The PgBouncer (transaction pooling) the tests' jobrelay goes through (`servers.py run
    # --pgbouncer`, `make test-pgbouncer`); None: straight to PostgreSQL. ``database_url``
    # stays the direct admin connection either way (CREATE DATABASE ... TEMPLATE needs it).
    pooler_url: str | None = None

    @property
    def pool_mode(self) -> Literal["session", "transaction"]:
        """``Settings.database_pool_mode`` for URLs of ``through_pooler``."""
        return "session" if self.pooler_url is None else "transaction"

    def through_pooler(self, url: str) -> str:
        """``url`` (a database of the direct server) through the pooler, when there is one."""
        if self.pooler_url is None:
            return url
        parts = urllib.parse.urlsplit(url)
        netloc = urllib.parse.urlsplit(self.pooler_url).netloc
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def close(self) -> None:
        for close in self.on_close:
            close()


def from_environment() -> Servers | None:
    """With ``JOBRELAY_DIRECT_DATABASE_URL`` set (`servers.py run --pgbouncer`),
    ``JOBRELAY_DATABASE_URL`` is a pooler in front of that server."""
    database = os.environ.get("JOBRELAY_DATABASE_URL")
    amqp = os.environ.get("JOBRELAY_AMQP_URL")
    api = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (database and amqp and api):
        return None
    servers_dir = os.environ.get("JOBRELAY_SERVERS_DIR")
    direct = os.environ.get("JOBRELAY_DIRECT_DATABASE_URL")
    if direct:
        return Servers(direct, amqp, api, servers_dir, pooler_url=database)
    return Servers(database, amqp, api, servers_dir)


# --- scripts/servers.py -------------------------------------------------------------------------

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def servers_script() -> ModuleType:
    """The package behind ``scripts/servers.py`` (``scripts/localservers``): ``up``, ``down``
    and the fault helpers (``pg_restart``, ``rabbitmqctl``, ...) of its servers."""
    if str(SCRIPTS) not in sys.path:  # scripts/ is a folder of tools, not a package
        sys.path.append(str(SCRIPTS))
    return importlib.import_module("localservers")


def from_servers_script() -> Servers:
    """Servers started here by ``scripts/servers.py up``, stopped by ``close()`` (their data is
    kept, as ``down`` keeps it). Their variables go into ``os.environ``, so that every process
    started from here on finds them."""
    script = servers_script()
    os.environ.update(script.up())
    started = from_environment()
    assert started is not None, "scripts/servers.py up exported no URLs"
    return dataclasses.replace(started, on_close=(script.down,))


# --- discovery ----------------------------------------------------------------------------------


def docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def discover() -> Servers:
    mode = os.environ.get("JOBRELAY_TEST_SERVERS", "").strip().lower()
    if mode and mode not in MODES:
        raise NoServers(f"JOBRELAY_TEST_SERVERS={mode!r}: use one of {', '.join(MODES)}")
    if mode == "containers":
        if not docker_answers():
            raise NoServers(
                "JOBRELAY_TEST_SERVERS=containers but no Docker engine answers "
                "(start dockerd; scripts/ci-docker.sh installs and starts it)"
            )
        return from_testcontainers()
    servers = from_environment()
    if servers is not None:
        return servers
    if mode == "local":
        raise NoServers("JOBRELAY_TEST_SERVERS=local: " + HOW_TO_START)
    if docker_answers():
        return from_testcontainers()
    raise NoServers(HOW_TO_START)


# --- testcontainers ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _local_engine() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


def _publish(container: Any, port: int, host_ip: str | None) -> int:
    """A fixed host port (a container stopped and started keeps its URL), on 127.0.0.1 when the
    engine is on this machine."""
    host_port = _free_port()
    container.ports[str(port)] = (host_ip, host_port) if host_ip else host_port
    return host_port


def from_testcontainers() -> Servers:
    # Before testcontainers reads its configuration (at import): no Ryuk reaper (its image
    # cannot be pulled everywhere: the session removes its containers itself), and for an
    # engine on this machine the published ports are reached on 127.0.0.1.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    local = _local_engine()
    if local:
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        os.environ.setdefault("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
    with warnings.catch_warnings():  # testcontainers' own deprecations, not ours to fix
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from testcontainers.community.postgres import PostgresContainer
            from testcontainers.community.rabbitmq import RabbitMqContainer
        except ImportError:  # testcontainers before the "community" modules
            from testcontainers.postgres import PostgresContainer
            from testcontainers.rabbitmq import RabbitMqContainer

    host_ip = "127.0.0.1" if local else None
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    labels = {"org.jobrelay.test-session": tag}
    password = secrets.token_hex(12)
    started: list[Any] = []

    def remove_all() -> None:
        while started:
            container = started.pop()
            with contextlib.suppress(Exception):
                container.stop()

    atexit.register(remove_all)  # also when the session ends without its fixture finalizer
    try:
        postgres = PostgresContainer(
            os.environ.get("JOBRELAY_TEST_POSTGRES_IMAGE", POSTGRES_IMAGE),
            username="jobrelay",
            password=password,
            dbname="jobrelay",
            driver="psycopg",
        )
        postgres.with_name(f"jobrelay-test-postgres-{tag}").with_kwargs(labels=labels)
        _publish(postgres, 5432, host_ip)
        started.append(postgres)
        postgres.start()

        rabbit = RabbitMqContainer(
            os.environ.get("JOBRELAY_TEST_RABBITMQ_IMAGE", RABBITMQ_IMAGE),
            username="jobrelay",
            password=password,
        )
        # A fixed hostname keeps the node name, hence its data, across a stop and start.
        rabbit.with_name(f"jobrelay-test-rabbitmq-{tag}").with_kwargs(
            labels=labels, hostname="rabbitmq"
        )
        _publish(rabbit, 5672, host_ip)
        _publish(rabbit, 15672, host_ip)
        started.append(rabbit)
        rabbit.start()

        host = rabbit.get_container_host_ip()
        credentials = f"jobrelay:{password}"
        amqp = f"amqp://{credentials}@{host}:{rabbit.get_exposed_port(5672)}/"
        api = f"http://{credentials}@{host}:{rabbit.get_exposed_port(15672)}/"
        _wait(lambda: _management_answers(api), 90, "the RabbitMQ management API")
        database = postgres.get_connection_url()
    except BaseException:
        remove_all()
        raise
    return Servers(
        database,
        amqp,
        api,
        None,
        (postgres, rabbit),
        faults=ContainerFaults(postgres, rabbit, database, api),
        on_close=(remove_all,),
    )


def _wait(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise NoServers(f"{what} did not answer within {timeout:.0f}s")
        time.sleep(0.3)


def _management_answers(api_url: str, amqp_port: int | None = None) -> bool:
    """The management API answers (the broker application runs) and so does AMQP."""
    try:
        management_request(api_url, "GET", "/api/overview")
        if amqp_port is not None:
            host = urllib.parse.urlsplit(api_url).hostname or "127.0.0.1"
            socket.create_connection((host, amqp_port), timeout=2).close()
        return True
    except Exception:
        return False


def _database_answers(url: str) -> bool:
    import psycopg

    from jobrelay.db.engine import libpq_url

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=2) as connection:
            connection.execute("SELECT 1")
        return True
    except Exception:
        return False


class ContainerFaults:
    """The fault helpers of scripts/servers.py, on the containers of the session."""

    def __init__(self, postgres: Any, rabbit: Any, database_url: str, api_url: str) -> None:
        self.postgres = postgres
        self.rabbit = rabbit
        self.database_url = database_url
        self.api_url = api_url

    @staticmethod
    def _docker(container: Any) -> Any:
        return container.get_wrapped_container()

    def pg_stop(self) -> None:
        """Crash-like: the whole container SIGKILLed."""
        wrapped = self._docker(self.postgres)
        wrapped.kill(signal="SIGKILL")
        wrapped.wait(timeout=60)

    def pg_start(self) -> None:
        wrapped = self._docker(self.postgres)
        wrapped.reload()
        if wrapped.status != "running":
            wrapped.start()
        _wait(lambda: _database_answers(self.database_url), 60, "PostgreSQL after its start")

    def pg_restart(self) -> None:
        self.pg_stop()
        self.pg_start()

    def rabbitmqctl(self, *args: str) -> str:
        exit_code, output = self._docker(self.rabbit).exec_run(["rabbitmqctl", *args])
        text = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
        if exit_code != 0:
            raise RuntimeError(f"rabbitmqctl {args[0] if args else ''} exited {exit_code}")
        return text

    def rabbit_restart_app(self) -> None:
        self.rabbit_stop_app()
        self.rabbit_start_app()

    def rabbit_stop_app(self, node: int = 1) -> None:
        """``node``: as scripts/servers.py's; the container is the one node."""
        self.rabbitmqctl("stop_app")

    def rabbit_start_app(self, node: int = 1) -> None:
        self.rabbitmqctl("start_app")
        amqp_port = int(self.rabbit.get_exposed_port(5672))
        _wait(lambda: _management_answers(self.api_url, amqp_port), 90, "RabbitMQ after start_app")


# --- RabbitMQ management API ------------------------------------------------------------------


def management_request(api_url: str, method: str, path: str, body: Any = None) -> Any:
    """One call of the RabbitMQ management HTTP API, as the user of ``api_url`` (guest if it
    names none); ``path`` is relative to the API's base, which may have a path of its own."""
    parts = urllib.parse.urlsplit(api_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port}{parts.path.rstrip('/')}"
    request = urllib.request.Request(base + path, method=method)
    user = urllib.parse.unquote(parts.username or "guest")
    password = urllib.parse.unquote(parts.password or "guest")
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, data=data, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def vhost_amqp_url(amqp_url: str, vhost: str) -> str:
    """The URL on ``vhost``; each node's, for a cluster's comma-separated list."""
    return ",".join(_on_vhost(url.strip(), vhost) for url in amqp_url.split(","))


def _on_vhost(amqp_url: str, vhost: str) -> str:
    parts = urllib.parse.urlsplit(amqp_url)
    return urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, "/" + urllib.parse.quote(vhost, safe=""), "", "")
    )


def create_vhost(api_url: str, vhost: str) -> None:
    quoted = urllib.parse.quote(vhost, safe="")
    management_request(api_url, "PUT", f"/api/vhosts/{quoted}", {})
    user = urllib.parse.urlsplit(api_url).username or "guest"
    management_request(
        api_url,
        "PUT",
        f"/api/permissions/{quoted}/{user}",
        {"configure": ".*", "write": ".*", "read": ".*"},
    )


def delete_vhost(api_url: str, vhost: str) -> None:
    quoted = urllib.parse.quote(vhost, safe="")
    with contextlib.suppress(Exception):
        management_request(api_url, "DELETE", f"/api/vhosts/{quoted}")
