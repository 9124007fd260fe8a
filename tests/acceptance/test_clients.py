"""Clients and their tokens, through the CLI and a running API process.

``jobrelay clients list [--json] | enable NAME | disable NAME | rotate NAME [--grace D]``. A
rotation keeps the client row and its jobs and prints the new token once; the old token is
refused at once, or when its grace period ends. The API caches token lookups, so each change
is checked against a token the API has just answered (a warm cache).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jobrelay.core.settings import Settings
from tests.support.processes import (
    Service,
    run_cli as cli,
    running_api,
    service_env,
    wait_for,
)


class Api:
    def __init__(self, service: Service, env: dict[str, str], base: str) -> None:
        self.service, self.env, self.base = service, env, base

    def status(self, token: str, path: str = "/v1/jobs") -> int:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code

    def submit(self, token: str, key: str) -> str:
        request = urllib.request.Request(
            self.base + "/v1/jobs",
            data=json.dumps({"type": "demo.sleep", "payload": {"seconds": 0}}).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 202
            return str(json.loads(response.read())["id"])


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Api]:
    with running_api(settings, tmp_path) as (service, env, base):
        yield Api(service, env, base)


def create(env: dict[str, str], name: str, *flags: str) -> str:
    result = cli(env, "clients", "create", name, "--json", *flags)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["token"])


def listed(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    result = cli(env, "clients", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {item["name"]: item for item in json.loads(result.stdout)}


def test_clients_list_shows_every_client_with_its_role_and_state(settings: Settings) -> None:
    env = service_env(settings)
    create(env, "shop")
    create(env, "ops", "--admin")
    assert cli(env, "clients", "disable", "shop").returncode == 0

    clients = listed(env)
    text = cli(env, "clients", "list")

    assert {name: (c["admin"], c["disabled"]) for name, c in clients.items()} == {
        "jobrelay-scheduler": (False, False),  # built in: owns the periodic schedules' jobs
        "shop": (False, True),
        "ops": (True, False),
    }
    assert clients["shop"]["disabled_at"] is not None
    assert text.returncode == 0
    lines = text.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].split()[:3] == ["jobrelay-scheduler", "client", "enabled"]
    assert lines[1].split()[:3] == ["shop", "client", "disabled"]
    assert lines[2].split()[:3] == ["ops", "admin", "enabled"]


def test_disable_refuses_the_token_at_once_and_enable_gives_it_back(api: Api) -> None:
    token = create(api.env, "shop")
    assert api.status(token) == 200  # cached by the API now

    disabled = cli(api.env, "clients", "disable", "shop")
    assert disabled.returncode == 0, disabled.stderr
    assert api.status(token) == 401
    assert cli(api.env, "clients", "disable", "shop").stdout.strip().endswith("already disabled")

    enabled = cli(api.env, "clients", "enable", "shop")
    assert enabled.returncode == 0, enabled.stderr
    assert "enabled" in enabled.stdout
    assert api.status(token) == 200
    assert listed(api.env)["shop"]["disabled"] is False


def test_enable_or_disable_of_an_unknown_client_is_one_line_and_exit_1(settings: Settings) -> None:
    env = service_env(settings)
    for action in ("enable", "disable", "rotate"):
        result = cli(env, "clients", action, "nobody")
        assert result.returncode == 1, action
        assert result.stderr.strip().splitlines() == [
            "jobrelay: no client named 'nobody' (see: jobrelay clients list)"
        ]


def test_rotate_keeps_the_client_and_its_jobs_and_refuses_the_old_token_at_once(
    api: Api,
) -> None:
    old = create(api.env, "shop")
    job_id = api.submit(old, "before-rotation")
    client_id = listed(api.env)["shop"]["id"]
    assert api.status(old) == 200

    rotated = cli(api.env, "clients", "rotate", "shop")

    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert new.startswith("jr_") and new != old and len(rotated.stdout.splitlines()) == 1
    assert "refused from now on" in rotated.stderr
    assert new not in rotated.stderr and old not in rotated.stdout + rotated.stderr
    assert api.status(old) == 401
    assert api.status(new) == 200
    assert api.status(new, f"/v1/jobs/{job_id}") == 200  # the same client: its jobs
    assert listed(api.env)["shop"]["id"] == client_id
    assert listed(api.env)["shop"]["previous_token_expires_at"] is None
    assert new not in api.service.output() and old not in api.service.output()


def test_rotate_with_a_grace_period_keeps_the_old_token_working_until_it_ends(
    api: Api,
) -> None:
    old = create(api.env, "shop")
    assert api.status(old) == 200

    # Long enough for the checks below on a loaded machine (each CLI call is a process start).
    rotated = cli(api.env, "clients", "rotate", "shop", "--grace", "10s", "--json")

    assert rotated.returncode == 0, rotated.stderr
    assert api.status(old) == 200  # within the grace period
    answer = json.loads(rotated.stdout)
    new = answer["token"]
    assert api.status(new) == 200
    job_id = api.submit(old, "during-grace")
    assert api.status(new, f"/v1/jobs/{job_id}") == 200
    assert answer["previous_token_expires_at"] is not None
    assert listed(api.env)["shop"]["previous_token_expires_at"] is not None

    wait_for(lambda: api.status(old) == 401, 30, 0.2, what="the grace period to end")
    assert api.status(new) == 200
    assert listed(api.env)["shop"]["previous_token_expires_at"] is None


def test_rotating_again_ends_the_previous_grace_period(api: Api) -> None:
    first = create(api.env, "shop")
    second = json.loads(cli(api.env, "clients", "rotate", "shop", "--grace", "1h", "--json").stdout)
    third = json.loads(cli(api.env, "clients", "rotate", "shop", "--grace", "1h", "--json").stdout)
    assert api.status(first) == 401
    assert api.status(second["token"]) == 200
    assert api.status(third["token"]) == 200


@pytest.mark.parametrize("grace", ["soon", "-5m", "31d"])
def test_a_bad_grace_is_one_line_and_changes_nothing(api: Api, grace: str) -> None:
    token = create(api.env, "shop")
    result = cli(api.env, "clients", "rotate", "shop", f"--grace={grace}")
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "--grace" in result.stderr
    assert api.status(token) == 200


def test_the_grace_period_is_measured_on_the_database_clock(api: Api) -> None:
    """The expiry the CLI prints is the database's now() + grace (every API process agrees)."""
    create(api.env, "shop")
    before = time.time()
    answer = json.loads(
        cli(api.env, "clients", "rotate", "shop", "--grace", "10m", "--json").stdout
    )
    expires = datetime.fromisoformat(answer["previous_token_expires_at"]).timestamp()
    assert before + 590 < expires < time.time() + 610
