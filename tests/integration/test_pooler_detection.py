"""Pointed at PgBouncer in transaction mode without ``JOBRELAY_DATABASE_POOL_MODE``, every
service works (SPEC §25, issue 37 item 6): the probe at start (``jobrelay.db.pooler``) finds
the pooler, takes transaction mode's settings and says so once. Before it, 32 of 40
submissions answered 500 (``InvalidSqlStatementName``) and accepted jobs stayed queued.

The pooler is a real PgBouncer 1.18: the tier's own under ``make test-pgbouncer``, else one
started here in front of the test servers' PostgreSQL (scripts/localservers/pgbouncer.py)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from jobrelay.db.pooler import pooler_in_front, settle_pool_mode
from tests.conftest import MakeSettings, auth
from tests.support.processes import running_api
from tests.support.servers import Servers, servers_script
from tests.support.system import System

JOBS = 50
WARNING = "JOBRELAY_DATABASE_POOL_MODE is unset: running in transaction mode"


@pytest.fixture
def pooled_database_url(servers: Servers, direct_database_url: str) -> Iterator[str]:
    """The test's database through a PgBouncer in transaction mode."""
    if servers.pooler_url is not None:
        yield servers.through_pooler(direct_database_url)
        return
    local = servers_script()
    if servers.servers_dir is None:  # a container's PostgreSQL: a PgBouncer of ours before it
        yield from pgbouncer_before(local, direct_database_url)
        return
    lay = local.common.layout()
    bouncer, env = local.pgbouncer.started(
        lay, local.common.load_state(lay), {"JOBRELAY_DATABASE_URL": direct_database_url}
    )
    try:
        yield env["JOBRELAY_DATABASE_URL"]
    finally:
        bouncer.stop()


def pgbouncer_before(local: Any, direct_database_url: str) -> Iterator[str]:
    """A PgBouncer started here in front of a PostgreSQL scripts/servers.py did not start (the
    containers tier's), with that server's superuser; its folder readable by the postgres OS
    user PgBouncer runs as."""
    address = urllib.parse.urlsplit(direct_database_url)
    base = Path(tempfile.mkdtemp(prefix="jobrelay-pgbouncer-"))
    base.chmod(0o755)
    bouncer = local.pgbouncer.PgBouncer(
        SimpleNamespace(base=base),
        address.port,
        user=urllib.parse.unquote(address.username or ""),
        password=urllib.parse.unquote(address.password or ""),
    )
    try:
        bouncer.start()
        yield direct_database_url.replace(f":{address.port}/", f":{bouncer.port}/", 1)
    finally:
        bouncer.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_direct_connection_keeps_session_mode_and_says_nothing(
    direct_database_url: str, make_settings: MakeSettings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(database_url=direct_database_url, database_pool_mode="auto")

    with caplog.at_level(logging.INFO, logger="jobrelay"):
        settled = settle_pool_mode(settings)

    assert not pooler_in_front(direct_database_url)
    assert settled.database_pool_mode == "session"  # prepared statements and LISTEN stay on
    assert caplog.records == []


def test_an_explicit_mode_is_taken_as_it_is_without_a_probe(
    pooled_database_url: str, make_settings: MakeSettings
) -> None:
    # A pooler in session mode, said so: full speed, no probe, no warning.
    settings = make_settings(database_url=pooled_database_url, database_pool_mode="session")

    assert pooler_in_front(pooled_database_url)
    assert settle_pool_mode(settings) is settings


async def test_through_pgbouncer_with_the_mode_unset_every_submission_and_job_succeeds(
    system: System, pooled_database_url: str
) -> None:
    system.configure(database_url=pooled_database_url, database_pool_mode="auto")
    failing = {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}}
    sleeping = {"type": "demo.sleep", "payload": {"seconds": 0}}
    with ExitStack() as stack:
        api, _, base = stack.enter_context(running_api(system.settings, system.log_dir))
        stack.enter_context(system.running("services"))
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            # A few at a time, within the API's pool: more at once are shed with 503
            # overloaded by design (docs/overload.md), which is not what this test is about.
            at_once = asyncio.Semaphore(4)

            async def submit(number: int) -> httpx.Response:
                body = failing if number % 5 == 0 else sleeping
                async with at_once:
                    return await http.post(
                        "/v1/jobs", json=body, headers=auth(system.alice, f"pooled-{number}")
                    )

            answers = await asyncio.gather(*(submit(number) for number in range(JOBS)))
        assert [answer.status_code for answer in answers] == [202] * JOBS, [
            answer.text for answer in answers if answer.status_code != 202
        ]
        ids = [answer.json()["id"] for answer in answers]
        await system.wait_for("succeeded", *ids, what=f"all {JOBS} jobs through PgBouncer")
        retried = [await system.store.get_job(uuid.UUID(id_)) for id_ in ids[::5]]
        api_log = api.output()

    assert all(job is not None and job.attempts == 2 for job in retried)
    assert WARNING in api_log
    for service in ("dispatcher", "consumer0"):
        assert WARNING in (system.log_dir / "services" / f"{service}.log").read_text()


def test_the_cli_through_pgbouncer_with_the_mode_unset_works(
    system: System, pooled_database_url: str
) -> None:
    system.configure(database_url=pooled_database_url, database_pool_mode="auto")

    result = system.cli("jobs", "list", "--json")

    assert result.returncode == 0, result.stderr
    assert WARNING in result.stderr
