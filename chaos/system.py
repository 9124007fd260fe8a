"""The system under test: servers, a scratch database and vhost, and the services as processes.

Servers come from the environment (``JOBRELAY_DATABASE_URL``, ``JOBRELAY_AMQP_URL``,
``JOBRELAY_RABBITMQ_API_URL`` and ``JOBRELAY_SERVERS_DIR``, as ``scripts/servers.py`` exports
them); without them, ``scripts/servers.py`` starts throwaway ones for the run.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
SERVERS_SCRIPT = ROOT / "scripts" / "servers.py"
REQUIRED_ENV = (
    "JOBRELAY_DATABASE_URL",
    "JOBRELAY_AMQP_URL",
    "JOBRELAY_RABBITMQ_API_URL",
    "JOBRELAY_SERVERS_DIR",
)


@cache
def servers_script() -> ModuleType:
    """``scripts/servers.py`` loaded by path: its fault helpers (pg_restart, rabbitmqctl...)."""
    spec = importlib.util.spec_from_file_location("jobrelay_servers", SERVERS_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Servers:
    database_url: str  # admin: may CREATE DATABASE
    amqp_url: str
    rabbitmq_api_url: str
    started_here: bool

    @classmethod
    def find_or_start(cls) -> Servers:
        if all(os.environ.get(name) for name in REQUIRED_ENV):
            started = False
        else:
            print("chaos: no servers in the environment; starting throwaway ones", flush=True)
            os.environ.update(servers_script().up())
            started = True
        return cls(
            os.environ["JOBRELAY_DATABASE_URL"],
            os.environ["JOBRELAY_AMQP_URL"],
            os.environ["JOBRELAY_RABBITMQ_API_URL"],
            started,
        )

    def stop_if_started_here(self) -> None:
        if self.started_here:
            servers_script().down()


# --- URLs ---------------------------------------------------------------------------------------


def host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def with_netloc(url: str, host: str, port: int) -> str:
    """``url`` pointed at ``host:port`` (credentials, path and query kept)."""
    parts = urllib.parse.urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{host}:{port}" if credentials else f"{host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def with_path(url: str, path: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=path))


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


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
        with psycopg.connect(libpq_url(servers.database_url), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{database}"')
        vhost = f"jobrelay-{name}"
        quoted = urllib.parse.quote(vhost, safe="")
        management(servers.rabbitmq_api_url, "PUT", f"/api/vhosts/{quoted}", {})
        user = urllib.parse.urlsplit(servers.rabbitmq_api_url).username or "guest"
        management(
            servers.rabbitmq_api_url,
            "PUT",
            f"/api/permissions/{quoted}/{user}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )
        return cls(
            servers.database_url,
            servers.rabbitmq_api_url,
            database,
            vhost,
            with_path(servers.database_url, "/" + database),
            with_path(servers.amqp_url, "/" + quoted),
        )

    def drop(self) -> None:
        with (
            contextlib.suppress(Exception),
            psycopg.connect(libpq_url(self.admin_url), autocommit=True) as connection,
        ):
            connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        with contextlib.suppress(Exception):
            quoted = urllib.parse.quote(self.vhost, safe="")
            management(self.api_url, "DELETE", f"/api/vhosts/{quoted}")


def management(api_url: str, method: str, path: str, body: Any = None) -> Any:
    """One call of the RabbitMQ management HTTP API (credentials from the URL)."""
    parts = urllib.parse.urlsplit(api_url)
    base = urllib.parse.urlunsplit(
        (parts.scheme, f"{parts.hostname}:{parts.port}", parts.path.rstrip("/"), "", "")
    )
    request = urllib.request.Request(base + path, method=method)
    credentials = f"{parts.username or ''}:{urllib.parse.unquote(parts.password or '')}"
    request.add_header("Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, data=data, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


# --- services as processes ----------------------------------------------------------------------


def service_env(values: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    env.update(values)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobrelay", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobrelay", *self.args],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
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


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")
        time.sleep(0.2)


def run_name() -> str:
    return f"chaos_{uuid.uuid4().hex[:10]}"
