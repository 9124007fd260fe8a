"""``jobrelay jobs list``: an operator's view of the jobs of every client, read from PostgreSQL
(issue 24 item 16: an operator needed curl and a client's token to find a job's id)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from jobrelay.cli import OUTPUT_CUT_STATUS
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.processes import run_cli, run_into_a_closed_pipe, service_env

T0 = datetime(2024, 5, 1, 12, tzinfo=UTC)


async def three_jobs(store: Store) -> dict[str, Any]:
    """shop's queued job (oldest) and quarantined one, crm's running one (newest)."""
    shop = await factories.client(store, name="shop")
    crm = await factories.client(store, name="crm")
    old = await factories.job(store, client_id=shop.id, created_at=T0)
    failed = await factories.job(
        store,
        client_id=shop.id,
        state="quarantined",
        job_type="demo.fail",
        created_at=T0 + timedelta(minutes=1),
    )
    running = await factories.job(
        store, client_id=crm.id, state="running", created_at=T0 + timedelta(minutes=2)
    )
    return {"old": str(old.id), "failed": str(failed.id), "running": str(running.id)}


def listed(settings: Settings, *args: str) -> dict[str, Any]:
    result = run_cli(service_env(settings), "jobs", "list", *args, "--json")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


async def test_every_clients_jobs_are_listed_newest_first_one_line_each(
    settings: Settings, store: Store
) -> None:
    ids = await three_jobs(store)

    everything = listed(settings)
    readable = run_cli(service_env(settings), "jobs", "list")

    assert [job["id"] for job in everything["jobs"]] == [ids["running"], ids["failed"], ids["old"]]
    assert [job["client"] for job in everything["jobs"]] == ["crm", "shop", "shop"]
    assert everything["next_cursor"] is None
    lines = readable.stdout.strip().splitlines()
    assert [line.split()[:4] for line in lines] == [
        [ids["running"], "running", "demo.sleep", "crm"],
        [ids["failed"], "quarantined", "demo.fail", "shop"],
        [ids["old"], "queued", "demo.sleep", "shop"],
    ]
    assert all("attempts " in line and " updated " in line for line in lines)


async def test_the_listing_filters_by_state_type_and_client(
    settings: Settings, store: Store
) -> None:
    ids = await three_jobs(store)

    def found(*args: str) -> list[str]:
        return [job["id"] for job in listed(settings, *args)["jobs"]]

    assert found("--state", "quarantined") == [ids["failed"]]
    assert found("--type", "demo.sleep") == [ids["running"], ids["old"]]
    assert found("--client", "shop") == [ids["failed"], ids["old"]]
    assert found("--client", "shop", "--state", "running") == []


async def test_the_listing_pages_by_cursor_without_repeating_a_job(
    settings: Settings, store: Store
) -> None:
    ids = await three_jobs(store)

    first = listed(settings, "--limit", "2")
    second = listed(settings, "--limit", "2", "--cursor", first["next_cursor"])

    assert [job["id"] for job in first["jobs"]] == [ids["running"], ids["failed"]]
    assert [job["id"] for job in second["jobs"]] == [ids["old"]]
    assert second["next_cursor"] is None


async def test_a_bad_state_client_or_limit_is_one_line_and_a_non_zero_exit(
    settings: Settings, store: Store
) -> None:
    await three_jobs(store)
    env = service_env(settings)

    for args, message in [
        (("--state", "done"), "argument --state: invalid choice: 'done'"),
        (("--client", "nobody"), "no client named 'nobody'"),
        (("--limit", "0"), "--limit must be 1 to 1000"),
        (("--cursor", "not-a-cursor"), "is not one this command printed"),
    ]:
        result = run_cli(env, "jobs", "list", *args)
        assert result.returncode == 1, args
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("jobrelay: ") and message in line, (args, line)


async def test_a_list_piped_into_a_reader_that_is_gone_exits_quietly(
    settings: Settings, store: Store
) -> None:
    # `jobrelay jobs list | head -1` printed a BrokenPipeError traceback (issue 37 item 6).
    await three_jobs(store)

    status, stderr = run_into_a_closed_pipe(service_env(settings), "jobs", "list")

    assert stderr == ""
    assert status == OUTPUT_CUT_STATUS
