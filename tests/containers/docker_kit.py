"""Docker and Compose from the tests: the engine check, a compose project, HTTP to the host port.

Everything goes through the ``docker`` and compose command lines, as an operator would type it.
Compose v2 (``docker compose``) is used when the plugin answers, else ``docker-compose`` (1.29);
``JOBRELAY_COMPOSE="docker-compose"`` picks one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

NO_ENGINE = (
    "no Docker engine answers (`docker info` failed): start one (`dockerd`; "
    "scripts/ci-docker.sh installs and starts it on Debian), or run the other tiers"
)


def _run(args: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


@cache
def engine_problem() -> str | None:
    """None when a Docker engine and a compose command answer, else why not."""
    if shutil.which("docker") is None:
        return NO_ENGINE + " (no docker command)"
    try:
        if _run(["docker", "info", "--format", "{{.ServerVersion}}"], 20).returncode != 0:
            return NO_ENGINE
    except subprocess.TimeoutExpired:
        return NO_ENGINE + " (timed out)"
    if not compose_command():
        return "no compose command: neither `docker compose` (v2) nor `docker-compose` (1.29)"
    return None


# The compose tests build images and run for minutes: opt-in on a developer's machine
# (`make compose-test` sets JOBRELAY_COMPOSE_TEST=1), never skipped where CI is set (CI runs them).
compose_test_opt_in = pytest.mark.skipif(
    not (os.environ.get("JOBRELAY_COMPOSE_TEST") or os.environ.get("CI")),
    reason="the compose tests build images and run for minutes: "
    "run them with `make compose-test` (JOBRELAY_COMPOSE_TEST=1)",
)


def require_engine() -> None:
    """Skip without an engine; under CI (``CI`` set) fail instead: CI must run this tier."""
    problem = engine_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {problem}", pytrace=False)
    pytest.skip(problem)


@cache
def compose_command() -> tuple[str, ...]:
    configured = os.environ.get("JOBRELAY_COMPOSE")
    if configured:
        return tuple(shlex.split(configured))
    try:
        if _run(["docker", "compose", "version"], 20).returncode == 0:
            return ("docker", "compose")
    except (OSError, subprocess.TimeoutExpired):
        pass
    if shutil.which("docker-compose"):
        return ("docker-compose",)
    return ()


def docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    result = _run(["docker", *args], timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def parse_time(value: str) -> datetime:
    """Docker's RFC 3339 timestamps carry nanoseconds; Python takes microseconds."""
    value = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    return datetime.fromisoformat(value)


@dataclass
class Container:
    id: str
    name: str
    service: str
    state: dict[str, Any]
    restart_count: int

    @property
    def health(self) -> str | None:
        health = self.state.get("Health")
        return health.get("Status") if health else None

    @property
    def running(self) -> bool:
        return bool(self.state.get("Running"))

    @property
    def exit_code(self) -> int:
        return int(self.state.get("ExitCode", -1))

    @property
    def started_at(self) -> datetime:
        return parse_time(self.state["StartedAt"])

    @property
    def finished_at(self) -> datetime:
        return parse_time(self.state["FinishedAt"])


@dataclass
class Compose:
    """One compose project of the repository's compose.yaml, with its own env file."""

    project: str
    env_file: Path
    say: Callable[[str], None] = print
    command: tuple[str, ...] = field(default_factory=compose_command)

    def environment(self) -> dict[str, str]:
        # Only the env file speaks to compose: nothing from this process's JOBRELAY_* (the test
        # servers' URLs, say) or an operator's .env leaks into the project.
        names = set(read_env_file(self.env_file))
        return {key: value for key, value in os.environ.items() if key not in names}

    def run(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            *self.command,
            "--project-directory",
            str(ROOT),
            "-f",
            str(ROOT / "compose.yaml"),
            "-p",
            self.project,
            "--env-file",
            str(self.env_file),
            *args,
        ]
        result = subprocess.run(
            argv,
            cwd=ROOT,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def containers(self, service: str | None = None) -> list[Container]:
        label = f"label=com.docker.compose.project={self.project}"
        ids = docker("ps", "-aq", "--no-trunc", "--filter", label).split()
        if not ids:
            return []
        found = []
        for item in json.loads(docker("inspect", *ids)):
            name = item["Config"]["Labels"].get("com.docker.compose.service", "?")
            if service is None or name == service:
                found.append(
                    Container(
                        id=item["Id"],
                        name=item["Name"].lstrip("/"),
                        service=name,
                        state=item["State"],
                        restart_count=int(item.get("RestartCount", 0)),
                    )
                )
        return sorted(found, key=lambda c: c.name)

    def container(self, service: str) -> Container:
        (only,) = self.containers(service)
        return only

    def wait_healthy(self, services: Sequence[str], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            containers = self.containers()
            waiting = [
                f"{c.name}={c.health or ('running' if c.running else 'exited')}"
                for c in containers
                if c.service in services and c.health != "healthy"
            ]
            present = {c.service for c in containers}
            missing = [s for s in services if s not in present]
            if not waiting and not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what}: "
                    f"{', '.join(waiting + [f'{m}=absent' for m in missing])}"
                )
            time.sleep(1)

    def logs(self, container: Container) -> str:
        result = _run(["docker", "logs", container.id], 60)
        return result.stdout + result.stderr


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value
    return values


@dataclass
class Answer:
    status: int
    body: Any


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> Answer:
    """One request; an HTTP error is an answer, a connection error raises OSError."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        raw = error.read()
        status = error.code
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return Answer(status, parsed)
