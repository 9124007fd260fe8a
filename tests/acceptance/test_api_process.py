"""The API and the CLI as a user runs them: real processes, real HTTP, real PostgreSQL."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobrelay.core.settings import Settings
from tests.support.processes import (
    Service,
    run_cli as cli,
    running_api,
    service_env,
)


@pytest.fixture
def api_process(
    settings: Settings, tmp_path: Path
) -> Iterator[tuple[Service, dict[str, str], str]]:
    with running_api(settings, tmp_path) as api:
        yield api


def test_a_user_creates_a_client_submits_a_job_and_reads_it_back(
    api_process: tuple[Service, dict[str, str], str],
) -> None:
    service, env, base = api_process
    created = cli(env, "clients", "create", "shop", "--json")
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    env = env | {"JOBRELAY_TOKEN": token}

    submit = ["submit", "catalog.export", "--payload", '{"course": "JavaScript"}', "--key"]
    first = cli(env, *submit, "export-js", "--json")
    again = cli(env, *submit, "export-js", "--json")
    conflict = cli(
        env, "submit", "catalog.export", "--payload", '{"course": "Markdown"}', "--key", "export-js"
    )

    assert first.returncode == 0, first.stderr
    job = json.loads(first.stdout)
    assert json.loads(again.stdout)["id"] == job["id"]
    assert conflict.returncode == 1
    assert conflict.stderr.strip().splitlines() == [
        "jobrelay: 409 idempotency_conflict: the key was used for another type, payload or due "
        f"time (job {job['id']} has this key)"
    ]
    shown = cli(env, "jobs", "show", job["id"], "--json")
    assert json.loads(shown.stdout)["state"] == "queued"

    request = urllib.request.Request(
        f"{base}/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read())["payload"] == {"course": "JavaScript"}
    assert token not in service.output()


def test_cli_mistakes_print_one_line_and_exit_non_zero(
    api_process: tuple[Service, dict[str, str], str],
) -> None:
    _, env, _ = api_process
    cases = [
        (("submit", "demo.sleep", "--payload", "{not json", "--token", "x"), "not valid JSON"),
        (("submit", "demo.sleep", "--token", "jr_wrong"), "401 unauthorized"),
        (("jobs", "show", "not-a-uuid"), "is not a job id"),
        (("jobs", "show", "00000000-0000-0000-0000-000000000000"), "no job"),
        (
            ("submit", "demo.sleep", "--token", "x", "--api-url", "http://127.0.0.1:9"),
            "cannot reach the API",
        ),
    ]
    for args, message in cases:
        result = cli(env, *args)
        assert result.returncode != 0, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_a_duplicate_client_name_and_an_unreachable_database_are_clear_errors(
    settings: Settings,
) -> None:
    env = service_env(settings)
    assert cli(env, "clients", "create", "dup").returncode == 0
    duplicate = cli(env, "clients", "create", "dup")
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr

    unreachable = service_env(
        settings.model_copy(
            update={
                "database_url": "postgresql+psycopg://jobrelay:sentinel-pw@127.0.0.1:9/jobrelay"
            }
        )
    )
    result = cli(unreachable, "stats")
    assert result.returncode == 1
    assert "database unavailable" in result.stderr
    assert "sentinel-pw" not in result.stderr
    assert "Traceback" not in result.stderr


def test_migrate_is_idempotent(settings: Settings) -> None:
    result = cli(service_env(settings), "migrate")
    assert result.returncode == 0, result.stderr
    assert "at revision head" in result.stdout
