"""Run jobrelay services as real processes, for crash and acceptance tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pydantic import SecretStr

from jobrelay.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def jobrelay_env(values: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``values`` as its only JOBRELAY_* variables (none of ours
    leaks into a service), and the repository on PYTHONPATH (handlers of the test suite)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    env.update(values)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The process environment that carries ``settings`` as JOBRELAY_* variables."""
    values = {
        f"JOBRELAY_{k.upper()}": v.get_secret_value() if isinstance(v, SecretStr) else str(v)
        for k, v in settings.model_dump().items()
        if v is not None  # unset: the process keeps the default
    }
    return jobrelay_env(values | extra)


def spawn(
    args: list[str], env: dict[str, str], log: IO[bytes], *, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """``jobrelay ARGS`` with its output in ``log``. Its own session: a Ctrl-C meant for the
    test run does not reach it, and its fate is decided by the caller's signals alone."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobrelay", *args],
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Service:
    def __init__(
        self, args: list[str], env: dict[str, str], log_path: Path, *, cwd: Path = ROOT
    ) -> None:
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = spawn(args, env, self._log, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash at whatever point the process is."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.alive():
            self.terminate(10)
        self._log.close()


@contextmanager
def running(
    args: list[str], env: dict[str, str], log_path: Path, *, cwd: Path = ROOT
) -> Iterator[Service]:
    service = Service(args, env, log_path, cwd=cwd)
    try:
        yield service
    finally:
        service.stop()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 60, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``jobrelay ARGS`` as a user runs it, with ``env`` as its whole environment."""
    return subprocess.run(
        [sys.executable, "-m", "jobrelay", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_into_a_closed_pipe(env: dict[str, str] | None, *args: str) -> tuple[int, str]:
    """``jobrelay ARGS`` (``env``: its whole environment; None: this one) with its stdout a
    pipe whose reader closed before anything was written, as ``| head`` closes it after its
    lines: its status and its stderr."""
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobrelay", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        assert process.stdout is not None
        process.stdout.close()
        status = process.wait(60)
        stderr.seek(0)
        return status, stderr.read()


def answers(url: str) -> bool:
    """True when ``url`` answers 2xx (a health check)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def running_api(settings: Settings, log_dir: Path) -> Iterator[tuple[Service, dict[str, str], str]]:
    """``jobrelay api`` on a free port, once it answers: the service, its environment (with
    ``JOBRELAY_API_URL`` for the CLI) and its base URL."""
    port = free_port()
    env = service_env(settings, JOBRELAY_API_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    with running(["api"], env, log_dir / "api.log") as service:
        wait_for(lambda: answers(base + "/healthz") or not service.alive(), 30, what="the API")
        assert service.alive(), service.output()
        yield service, env | {"JOBRELAY_API_URL": base}, base
