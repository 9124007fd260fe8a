"""Where the tests find their PostgreSQL and RabbitMQ.

In this order: URLs from the environment (``JOBRELAY_DATABASE_URL``, ``JOBRELAY_AMQP_URL``,
``JOBRELAY_RABBITMQ_API_URL``, as ``scripts/servers.py`` exports them); testcontainers where a
Docker engine answers; else the session fails with a message saying how to start servers. Tests
never skip for want of a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

HOW_TO_START = (
    "no test servers: run the tests with `make test` (it starts throwaway PostgreSQL and "
    "RabbitMQ via scripts/servers.py), or export JOBRELAY_DATABASE_URL, JOBRELAY_AMQP_URL and "
    "JOBRELAY_RABBITMQ_API_URL (management API) pointing at servers you run, or start a Docker "
    "engine for testcontainers"
)


class NoServers(RuntimeError):
    pass


@dataclass(frozen=True)
class Servers:
    database_url: str  # an admin connection that may CREATE DATABASE
    amqp_url: str  # the default vhost; tests get their own vhost
    rabbitmq_api_url: str  # management HTTP API, with credentials
    servers_dir: str | None  # set when scripts/servers.py runs them (fault helpers need it)
    keepalive: tuple[Any, ...] = ()


def from_environment() -> Servers | None:
    database = os.environ.get("JOBRELAY_DATABASE_URL")
    amqp = os.environ.get("JOBRELAY_AMQP_URL")
    api = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (database and amqp and api):
        return None
    return Servers(database, amqp, api, os.environ.get("JOBRELAY_SERVERS_DIR"))


def docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def from_testcontainers() -> Servers:
    from testcontainers.postgres import PostgresContainer
    from testcontainers.rabbitmq import RabbitMqContainer

    postgres = PostgresContainer(
        "postgres:15", username="jobrelay", password="jobrelay", dbname="jobrelay", driver="psycopg"
    ).start()
    rabbit = RabbitMqContainer("rabbitmq:3.10-management").start()
    host = rabbit.get_container_host_ip()
    amqp = f"amqp://guest:guest@{host}:{rabbit.get_exposed_port(5672)}/"
    api = f"http://guest:guest@{host}:{rabbit.get_exposed_port(15672)}/"
    return Servers(postgres.get_connection_url(), amqp, api, None, (postgres, rabbit))


def discover() -> Servers:
    servers = from_environment()
    if servers is not None:
        return servers
    if docker_answers():
        return from_testcontainers()
    raise NoServers(HOW_TO_START)


# --- RabbitMQ management API ------------------------------------------------------------------


def management_request(api_url: str, method: str, path: str, body: Any = None) -> Any:
    parts = urllib.parse.urlsplit(api_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    request = urllib.request.Request(base + path, method=method)
    user, password = parts.username or "guest", parts.password or "guest"
    import base64

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
