"""Errors that once hid their cause, with the CLI run as a user runs it.

- ``jobrelay stats`` against a server that refuses the password said ``OperationalError``; it
  names the driver's cause, the URL it used (password masked) and the variable that sets it.
- a ``postgres://`` / ``postgresql://`` URL was a 30-line ``NoSuchModuleError`` traceback.
- ``jobrelay submit`` with a bad payload dropped the field errors the API returned.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobrelay.core.settings import Settings
from tests.support.processes import (
    Service,
    answers,
    free_port,
    run_cli as cli,
    running,
    running_api,
    service_env,
    wait_for,
)

SENTINEL_PASSWORD = "sentinel-pw-5c1e"


class PasswordRefusingServer:
    """Speaks just enough of the PostgreSQL protocol to refuse every password, as a server with
    ``password``/``scram`` authentication does (the test servers trust every local login)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection, contextlib.suppress(OSError):
                self._refuse(connection)

    def _refuse(self, connection: socket.socket) -> None:
        connection.settimeout(5)
        while True:  # SSLRequest / GSSENCRequest first: "no", then the startup message
            length, code = struct.unpack("!ii", _read(connection, 8))
            _read(connection, length - 8)
            if code not in (80877103, 80877104):
                break
            connection.sendall(b"N")
        connection.sendall(b"R" + struct.pack("!ii", 8, 3))  # cleartext password, please
        kind = _read(connection, 1)
        (length,) = struct.unpack("!i", _read(connection, 4))
        _read(connection, length - 4)
        assert kind == b"p"
        fields = b"".join(
            tag + text.encode() + b"\0"
            for tag, text in (
                (b"S", "FATAL"),
                (b"V", "FATAL"),
                (b"C", "28P01"),
                (b"M", 'password authentication failed for user "jobrelay"'),
            )
        )
        connection.sendall(b"E" + struct.pack("!i", len(fields) + 5) + fields + b"\0")

    def close(self) -> None:
        self.listener.close()


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def refusing_server() -> Iterator[PasswordRefusingServer]:
    server = PasswordRefusingServer()
    yield server
    server.close()


def test_stats_names_the_drivers_cause_the_masked_url_and_the_variable_that_sets_it(
    settings: Settings, refusing_server: PasswordRefusingServer
) -> None:
    url = f"postgresql://jobrelay:{SENTINEL_PASSWORD}@127.0.0.1:{refusing_server.port}/jobrelay"
    env = service_env(settings, JOBRELAY_DATABASE_URL=url)

    result = cli(env, "stats")

    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert 'password authentication failed for user "jobrelay"' in line
    assert f"postgresql+psycopg://jobrelay:***@127.0.0.1:{refusing_server.port}/jobrelay" in line
    assert "JOBRELAY_DATABASE_URL" in line
    assert SENTINEL_PASSWORD not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_stats_without_a_database_url_says_it_used_the_default_and_how_to_set_it(
    settings: Settings,
) -> None:
    env = service_env(settings)
    del env["JOBRELAY_DATABASE_URL"]

    result = cli(env, "stats")

    if result.returncode == 0:  # a PostgreSQL on localhost:5432 took the default credentials
        return
    (line,) = result.stderr.strip().splitlines()
    assert "postgresql+psycopg://jobrelay:***@localhost:5432/jobrelay" in line
    assert "JOBRELAY_DATABASE_URL is not set" in line
    assert not line.rstrip(")").endswith("OperationalError")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_a_postgres_url_works_for_the_cli_and_the_services(
    settings: Settings, amqp_url: str, tmp_path: Path, scheme: str
) -> None:
    url = scheme + "://" + settings.database_url.split("://", 1)[1]
    env = service_env(settings, JOBRELAY_DATABASE_URL=url, JOBRELAY_AMQP_URL=amqp_url)

    stats = cli(env, "stats", "--json")
    migrate = cli(env, "migrate")

    assert stats.returncode == 0, stats.stderr
    assert "jobs_by_state" in json.loads(stats.stdout)
    assert migrate.returncode == 0, migrate.stderr
    assert "NoSuchModuleError" not in stats.stderr + migrate.stderr

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(["api"], env | {"JOBRELAY_API_PORT": str(port)}, tmp_path / "api.log") as api:
        # Ready: its database (through that URL) and its broker answer.
        wait_for(lambda: answers(base + "/readyz") or not api.alive(), 30, what="the API")
        assert api.alive(), api.output()


@pytest.fixture
def api_process(settings: Settings, tmp_path: Path) -> Iterator[tuple[Service, dict[str, str]]]:
    with running_api(settings, tmp_path) as (service, env, _base):
        created = cli(env, "clients", "create", "shop", "--json")
        assert created.returncode == 0, created.stderr
        token = json.loads(created.stdout)["token"]
        yield service, env | {"JOBRELAY_TOKEN": token}


def test_submit_prints_the_field_errors_the_api_returned(
    api_process: tuple[Service, dict[str, str]],
) -> None:
    _, env = api_process

    bad_payload = cli(
        env, "submit", "demo.sleep", "--payload", '{"seconds": "soon", "colour": "red"}'
    )
    bad_request = cli(env, "submit", "demo.sleep", "--payload", "{}", "--max-attempts", "0")

    assert bad_payload.returncode == 1
    assert bad_payload.stderr.strip().splitlines() == [
        "jobrelay: 422 invalid_payload: payload does not match the schema of 'demo.sleep'",
        "  payload.seconds: Input should be a valid number, unable to parse string as a number",
        "  payload.colour: Extra inputs are not permitted",
    ]
    assert bad_request.returncode == 1
    lines = bad_request.stderr.strip().splitlines()
    assert lines[0].startswith("jobrelay: 422 validation_error")
    assert lines[1:] == ["  max_attempts: Input should be greater than or equal to 1"]
    assert "red" not in bad_payload.stderr and "soon" not in bad_payload.stderr


# --- issue 24: one line and exit 1 for every mistake ---------------------------------------------


def test_a_mistyped_command_is_one_line_and_exit_1_and_help_still_works(
    settings: Settings,
) -> None:
    # Guards issue 24 item 17: argparse printed its usage and the error (two lines), exit 2.
    env = service_env(settings)

    mistyped = cli(env, "stat")
    mistyped_action = cli(env, "jobs", "shw", "x")
    helped = cli(env, "jobs", "--help")

    assert mistyped.returncode == 1
    (line,) = mistyped.stderr.strip().splitlines()
    assert line.startswith("jobrelay: argument COMMAND: invalid choice: 'stat'")
    assert line.endswith("(see 'jobrelay --help')")
    assert mistyped_action.returncode == 1
    (line,) = mistyped_action.stderr.strip().splitlines()
    assert "invalid choice: 'shw'" in line and "'jobrelay jobs --help'" in line
    assert helped.returncode == 0 and helped.stdout.startswith("usage: jobrelay jobs")


@pytest.mark.parametrize("concurrency", ["0", "-3"])
def test_a_consumer_with_no_concurrency_is_refused_in_one_line(
    settings: Settings, concurrency: str
) -> None:
    # Guards issue 24 item 9: `--concurrency 0` started a consumer with the default (8).
    result = cli(service_env(settings), "consumer", "--concurrency", concurrency)

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["jobrelay: --concurrency must be at least 1"]


def test_a_submit_without_a_key_that_failed_prints_the_key_it_made(settings: Settings) -> None:
    # Guards issue 24 item 17: "retry with the same key" without the key it had made up.
    env = service_env(settings, JOBRELAY_TOKEN="jr_x", JOBRELAY_API_URL="http://127.0.0.1:9")

    made_up = cli(env, "submit", "demo.sleep")
    given = cli(env, "submit", "demo.sleep", "--key", "order-7")

    assert made_up.returncode == 1
    (line,) = made_up.stderr.strip().splitlines()
    assert line.startswith("jobrelay: cannot reach the API at http://127.0.0.1:9: ")
    key = line.rpartition("retry with --key ")[2]
    assert f"the key was {key}: " in line and len(key) == 36  # a UUID
    assert given.returncode == 1
    assert "order-7" not in given.stderr and "the key was" not in given.stderr


def test_a_conflicting_submit_names_the_job_that_has_the_key(
    api_process: tuple[Service, dict[str, str]],
) -> None:
    # Guards issue 24 item 17: the CLI's 409 did not name the existing job.
    _, env = api_process
    first = cli(env, "submit", "demo.sleep", "--payload", '{"seconds": 0}', "--key", "k-409")
    conflict = cli(env, "submit", "demo.sleep", "--payload", '{"seconds": 1}', "--key", "k-409")

    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("accepted: job ")
    job_id = first.stdout.split()[2]
    assert conflict.returncode == 1
    assert conflict.stderr.strip().splitlines() == [
        "jobrelay: 409 idempotency_conflict: the key was used for another type, payload or due "
        f"time (job {job_id} has this key)"
    ]
