"""With RabbitMQ down, what jobrelay prints (issue 24, item 10).

The operator's commands printed aiormq's raw ``error when creating transport: <AMQPConnectionError
…>`` before jobrelay's own line, which named only an exception class; every service's log filled
with the broker libraries' error lines. Now: one line of jobrelay's, the cause in words, the
password masked; and no line of aio-pika's or aiormq's in a service's log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobrelay.core.settings import Settings
from tests.support.processes import run_cli, running, service_env

SECRET = "sentinel-amqp-pw-7f3a"
CLOSED_PORT_URL = f"amqp://guest:{SECRET}@127.0.0.1:1/"  # nothing listens on port 1
LIBRARY_WORDS = ("error when creating transport", "AMQPConnectionError", "Traceback")


def _broker_down(settings: Settings) -> dict[str, str]:
    return service_env(settings.model_copy(update={"amqp_url": CLOSED_PORT_URL}))


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["quarantine", "replay", "--all"], "connection refused"),
        (["healthcheck"], "connection refused"),
        (["quarantine", "list"], "broker is unreachable (connection refused)"),
    ],
)
def test_an_operator_command_with_the_broker_down_prints_one_line_of_its_own_with_the_cause(
    settings: Settings, command: list[str], said: str
) -> None:
    done = run_cli(_broker_down(settings), *command)
    # healthcheck's verdict is its output (stdout); the others say what failed on stderr.
    said_lines = (done.stdout if command == ["healthcheck"] else done.stderr).splitlines()
    assert len(said_lines) == 1, done.stdout + done.stderr
    assert said in said_lines[0]
    for words in (*LIBRARY_WORDS, SECRET):
        assert words not in done.stdout + done.stderr
    if command != ["quarantine", "list"]:
        assert done.returncode == 1
        assert "127.0.0.1:1" in said_lines[0], "names the broker it tried, password masked"
    if command == ["healthcheck"]:
        assert done.stderr == ""


def test_a_services_log_with_the_broker_down_has_no_library_lines_and_names_the_cause(
    settings: Settings, tmp_path: Path
) -> None:
    env = _broker_down(settings)
    logs = {name: tmp_path / f"{name}.log" for name in ("dispatcher", "consumer")}
    with (
        running(["dispatcher"], env, logs["dispatcher"]),
        running(["consumer"], env, logs["consumer"]),
    ):
        time.sleep(6)  # several connection attempts of each, the healing's too
    for name, path in logs.items():
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines, name
        library = [line for line in lines if line["logger"].split(".")[0] in ("aiormq", "aio_pika")]
        assert library == [], f"{name}: {library[:3]}"
        assert not [line for line in lines if "traceback" in line], name
        ours = [line["msg"] for line in lines if line["level"] == "warning"]
        assert any("connection refused" in msg for msg in ours), f"{name}: {ours[:5]}"
        assert SECRET not in path.read_text()
