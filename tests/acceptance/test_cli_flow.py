"""``jobrelay queues …`` and ``jobrelay limits …`` run as a user runs them, against real
PostgreSQL and RabbitMQ (issue 25, items 4, 5 and 7): the queues' figures, a pause that the
API sees, limits set, listed and cleared, and every mistake one line with exit status 1."""

from __future__ import annotations

import json

import pytest

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support import factories
from tests.support.consumer_kit import rows, work_queue_count
from tests.support.processes import run_cli as cli, service_env


async def test_queues_list_pause_and_resume(make_settings: MakeSettings, store: Store) -> None:
    settings = make_settings()
    await work_queue_count(settings)  # the topology, as the services declare it
    await factories.jobs(store, 2, job_type="catalog.export", with_outbox=True)
    env = service_env(settings)

    listed = cli(env, "queues", "list")
    paused = cli(env, "queues", "pause", "default")
    as_json = cli(env, "queues", "list", "--json")
    resumed = cli(env, "queues", "resume", "default")

    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split() == ["default", "running", "2", "0", "0", "0"]
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("queue 'default' paused: none of its jobs is claimed")
    (queue,) = json.loads(as_json.stdout)["queues"]
    assert (queue["paused"], queue["paused_by"], queue["backlog"]) == (
        True,
        "jobrelay queues pause",
        2,
    )
    assert resumed.returncode == 0 and resumed.stdout.strip() == "queue 'default' resumed"
    (row,) = await rows(store, "SELECT paused_at FROM jobrelay.queues WHERE name = 'default'")
    assert row.paused_at is None


def test_queues_list_without_the_broker_shows_the_database_side(settings: Settings) -> None:
    listed = cli(service_env(settings), "queues", "list")  # the settings' broker: port 1
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[1].split() == ["default", "running", "0", "-", "0", "-"]
    assert lines[-1] == "broker unreachable: window in use and consumers unknown (-)"


async def test_limits_set_list_and_clear(settings: Settings, store: Store) -> None:
    env = service_env(settings)

    set_answer = cli(env, "limits", "set", "demo.sleep", "--concurrency", "2", "--rate", "10/s")
    listed = cli(env, "limits", "list")
    as_json = cli(env, "limits", "list", "--json")
    cleared = cli(env, "limits", "clear", "demo.sleep")
    empty = cli(env, "limits", "list")

    assert set_answer.returncode == 0, set_answer.stderr
    assert set_answer.stdout.startswith("demo.sleep  concurrency=2 rate=10/s  (runtime)")
    assert listed.stdout.strip() == "demo.sleep  concurrency=2 rate=10/s  (runtime)"
    assert json.loads(as_json.stdout) == {
        "limits": [
            {
                "type": "demo.sleep",
                "concurrency": 2,
                "rate": "10/s",
                "per_key": False,
                "source": "runtime",
                "throttle": None,
            }
        ]
    }
    assert cleared.returncode == 0
    assert cleared.stdout.strip() == "demo.sleep cleared; in force: demo.sleep  no limit  (code)"
    assert empty.stdout.strip() == "no limits in force"
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("queues", "pause", "nosuch"),
            "jobrelay: no queue named 'nosuch' (jobrelay queues list shows them)",
        ),
        (
            ("queues", "resume", "nosuch"),
            "jobrelay: no queue named 'nosuch' (jobrelay queues list shows them)",
        ),
        (
            ("limits", "set", "no.such", "--rate", "1/s"),
            "jobrelay: unknown job type 'no.such': not in the registry of JOBRELAY_HANDLERS "
            "(or --handlers) nor registered by a consumer",
        ),
        (
            ("limits", "clear", "no.such"),
            "jobrelay: unknown job type 'no.such': not in the registry of JOBRELAY_HANDLERS "
            "(or --handlers) nor registered by a consumer",
        ),
        (
            ("limits", "set", "demo.sleep", "--rate", "ten"),
            "jobrelay: invalid rate 'ten': write N/s or N/m with a whole N of at least 1 "
            "(for example 10/s or 600/m)",
        ),
        (
            ("limits", "set", "demo.sleep", "--concurrency", "0"),
            "jobrelay: a concurrency limit is from 1 to 100,000, not 0",
        ),
        (
            ("limits", "set", "demo.sleep", "--concurrency", "x"),
            "jobrelay: argument --concurrency: invalid int value: 'x' "
            "(see 'jobrelay limits set --help')",
        ),
        (
            ("limits", "set", "demo.sleep", "--throttle", "5/d"),
            "jobrelay: invalid throttle '5/d': write N/s or N/m or N/h with a whole N of at least "
            "1 (for example 5/s or 100/h)",
        ),
        (
            ("limits", "set", "demo.sleep"),
            "jobrelay: give --concurrency N, --rate R/s|R/m and/or --throttle N/s|N/m|N/h "
            "(jobrelay limits clear TYPE goes back to the code's limit)",
        ),
        (
            ("limits", "set", "demo.sleep", "--per-key"),
            "jobrelay: give --concurrency N, --rate R/s|R/m and/or --throttle N/s|N/m|N/h "
            "(jobrelay limits clear TYPE goes back to the code's limit)",
        ),
    ],
)
async def test_every_mistake_is_one_line_and_exit_1_and_changes_nothing(
    settings: Settings, store: Store, args: tuple[str, ...], line: str
) -> None:
    result = cli(service_env(settings), *args)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [line]
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []
    assert await rows(store, "SELECT name FROM jobrelay.queues WHERE paused_at IS NOT NULL") == []
