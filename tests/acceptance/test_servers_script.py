"""``make down`` once deleted the servers' data (and so the demo client and every job of
``make run``). ``scripts/servers.py down`` now stops and keeps it; ``down --delete-data``
(``make down DELETE=1``) deletes it and says what it deletes.

On a servers directory with data and nothing running, so no server is started or stopped here
(``make test`` and ``make run`` exercise the real ones).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

SCRIPT = ROOT / "scripts" / "servers.py"


def servers(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    env["JOBRELAY_SERVERS_DIR"] = str(base)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stopped_servers_with_data(base: Path) -> None:
    (base / "pg" / "data").mkdir(parents=True)
    (base / "pg" / "bootstrapped").touch()
    (base / "pg" / "data" / "PG_VERSION").write_text("15\n")
    (base / "rabbitmq" / "mnesia" / "jobrelay-1@localhost").mkdir(parents=True)
    ports = {"pg_port": 1, "amqp_port": 2, "mgmt_port": 3, "dist_port": 4}
    (base / "state.json").write_text(json.dumps(ports))
    (base / "env").write_text("export JOBRELAY_DATABASE_URL=x\n")


def test_down_stops_and_keeps_the_data_for_the_next_up(tmp_path: Path) -> None:
    stopped_servers_with_data(tmp_path)

    result = servers(tmp_path, "down")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pg" / "data" / "PG_VERSION").exists()
    assert (tmp_path / "rabbitmq" / "mnesia" / "jobrelay-1@localhost").exists()
    assert (tmp_path / "state.json").exists()  # the ports, hence the RabbitMQ node's name
    assert not (tmp_path / "env").exists()  # nothing runs
    assert f"data kept in {tmp_path}" in result.stderr
    assert "--delete-data" in result.stderr
    assert "deleting" not in result.stderr


def test_down_delete_data_deletes_it_and_says_what_it_deletes(tmp_path: Path) -> None:
    stopped_servers_with_data(tmp_path)

    result = servers(tmp_path, "down", "--delete-data")

    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "pg").exists()
    assert not (tmp_path / "rabbitmq").exists()
    assert not (tmp_path / "state.json").exists()
    assert f"deleting PostgreSQL data (databases, jobs, clients): {tmp_path / 'pg'}" in (
        result.stderr
    )
    assert f"deleting RabbitMQ data (queues and their messages): {tmp_path / 'rabbitmq'}" in (
        result.stderr
    )


def test_down_without_servers_or_data_says_so(tmp_path: Path) -> None:
    result = servers(tmp_path, "down")
    assert result.returncode == 0, result.stderr
    assert "nothing was running" in result.stderr
    assert "kept" not in result.stderr and "deleting" not in result.stderr
