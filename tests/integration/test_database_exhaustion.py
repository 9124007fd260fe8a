"""PostgreSQL out of connections (``max_connections`` reached), against the real servers
(docs/overload.md): the API answers 503 database_unavailable with Retry-After at once, the
dispatcher and the consumer wait it out with backoff, and once connections are free again every
service works on without a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import psycopg

from jobrelay.client import AsyncClient
from jobrelay.db.engine import libpq_url
from tests.conftest import auth
from tests.support.processes import running, running_api, service_env
from tests.support.system import System
from tests.support.waiting import eventually

JOB = {"type": "demo.sleep", "payload": {"seconds": 0}}
TAKEN_BY = "jobrelay-test-exhaustion"
# Far above any server's max_connections here (300 for scripts/servers.py, 100 in containers).
AT_MOST = 2000


def _terminate_services(holder: psycopg.Connection) -> int:
    """Close every connection of a jobrelay service; how many there were."""
    rows = holder.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'jobrelay-%%' AND application_name <> %s",
        (TAKEN_BY,),
    ).fetchall()
    return len(rows)


@contextmanager
def every_connection_taken(database_url: str) -> Iterator[int]:
    """Holds every connection the server allows, the services' own taken from them too (they
    are closed, and their slots taken before the services can connect again). Yields how many
    it holds."""
    held: list[psycopg.Connection] = []
    try:
        while len(held) < AT_MOST:
            try:
                held.append(
                    psycopg.connect(
                        libpq_url(database_url), application_name=TAKEN_BY, autocommit=True
                    )
                )
            except psycopg.OperationalError as error:
                assert "too many clients" in str(error) or "reserved" in str(error), error
                if not held or not _terminate_services(held[0]):
                    break
        assert len(held) < AT_MOST, "the server never refused a connection"
        yield len(held)
    finally:
        for connection in held:
            connection.close()


async def test_out_of_connections_every_service_answers_or_waits_and_recovers_by_itself(
    system: System, direct_database_url: str
) -> None:
    # PostgreSQL's own max_connections, hence the services straight on the server also in the
    # PgBouncer tier (a pooler in front queues its clients instead: docs/pgbouncer.md).
    system.configure(database_url=direct_database_url, database_pool_mode="session")
    env = service_env(system.settings)
    with ExitStack() as stack:
        api, _, base = stack.enter_context(running_api(system.settings, system.log_dir))
        dispatcher = stack.enter_context(
            running(["dispatcher"], env, system.log_dir / "dispatcher.log")
        )
        consumer = stack.enter_context(running(["consumer"], env, system.log_dir / "consumer.log"))
        async with AsyncClient(base, system.alice) as client:
            before = await client.submit(JOB["type"], JOB["payload"])
        await system.wait_for("succeeded", before.id, what="a job before the exhaustion")

        with every_connection_taken(system.settings.database_url) as taken:
            assert taken > 0
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                # Answered while every connection is still taken (until the block ends): the
                # API said so rather than wait for one.
                refused = await http.post(
                    "/v1/jobs", json=JOB, headers=auth(system.alice, "during")
                )
                assert refused.status_code == 503, refused.text
                assert refused.json()["code"] == "database_unavailable"
                assert int(refused.headers["Retry-After"]) >= 1
                assert "too many clients" not in refused.text  # the driver's words stay inside
                assert (await http.get("/healthz")).status_code == 200
                ready = await http.get("/readyz")
                assert ready.status_code == 503
                assert ready.json()["checks"]["database"] == "unavailable"

            async def dispatcher_said_so() -> bool:
                return "database unavailable" in dispatcher.output()

            # Held until the dispatcher met a refusal (its next lease, within a poll interval;
            # a fixed pause was a race on a loaded machine); the consumer meets them meanwhile.
            await eventually(dispatcher_said_so, what="the dispatcher's outage in its log")
            await asyncio.sleep(1.0)
            assert api.alive() and dispatcher.alive() and consumer.alive()

        # Connections are free again: the same processes work on, a retrying client included.
        async with AsyncClient(base, system.alice) as client:
            during = await client.submit(JOB["type"], JOB["payload"], key="during")
            after = await client.submit(JOB["type"], JOB["payload"])
        await system.wait_for("succeeded", during.id, after.id, what="jobs after the exhaustion")
        assert api.alive() and dispatcher.alive() and consumer.alive()
        assert "Traceback" not in api.output()
