"""``GET /v1/jobs/{id}?wait=S`` against a real API process and PostgreSQL: woken by the
notification of the job's finish, not by polling; answers with the current view at the end."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import psycopg

from jobrelay.core.settings import Settings
from jobrelay.db import tables
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from tests.conftest import auth, make_client
from tests.support import factories
from tests.support.processes import running_api

SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}


async def finish(database_url: str, job_id: str) -> None:
    """The job succeeded, as a consumer's final write would leave it."""
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as conn:
        await conn.execute(
            "UPDATE jobrelay.jobs SET state = 'succeeded', attempts = 1, finished_at = now() "
            "WHERE id = %s",
            (job_id,),
        )
        await conn.commit()


async def listening_connections(database_url: str) -> int:
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'jobrelay-api-listen' AND datname = current_database()"
            )
        ).fetchone()
        return int(row[0]) if row else 0


async def test_a_waiting_read_answers_as_the_job_finishes(
    settings: Settings, store: Store, tmp_path: Path, direct_database_url: str
) -> None:
    # Woken by NOTIFY on one LISTEN connection is what this test checks: behind PgBouncer that
    # connection takes JOBRELAY_LISTEN_DATABASE_URL, the server itself (docs/pgbouncer.md).
    settings = settings.model_copy(update={"listen_database_url": direct_database_url})
    token = await make_client(store, "waiter")
    with running_api(settings, tmp_path) as (_, _, base):
        async with httpx.AsyncClient(base_url=base, headers=auth(token), timeout=30) as http:
            job_id = (
                await http.post("/v1/jobs", json=SLEEP, headers={"Idempotency-Key": "w"})
            ).json()["id"]
            # Many waiters, on one job and on others: still one listening connection.
            others = [
                (
                    await http.post("/v1/jobs", json=SLEEP, headers={"Idempotency-Key": f"o{n}"})
                ).json()["id"]
                for n in range(20)
            ]
            waiting = [
                asyncio.create_task(http.get(f"/v1/jobs/{one}", params={"wait": 30}))
                for one in [job_id, job_id, *others]
            ]
            await asyncio.sleep(0.5)
            assert not any(task.done() for task in waiting)
            assert await listening_connections(settings.database_url) == 1
            await finish(settings.database_url, job_id)
            # Woken by the notification: with the listening connection up no waiter polls, and
            # the waits (30 s) run out long after this one (10 s) fails, so a "succeeded"
            # within it can only be the NOTIFY's doing (a logical bound, not a speed).
            answers = await asyncio.wait_for(asyncio.gather(*waiting[:2]), 10)
            assert [a.json()["state"] for a in answers] == ["succeeded", "succeeded"]
            assert not any(task.done() for task in waiting[2:])
            for task in waiting[2:]:
                task.cancel()
            await asyncio.gather(*waiting[2:], return_exceptions=True)


async def test_a_wait_that_runs_out_answers_the_current_view(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    token = await make_client(store, "patient")
    with running_api(settings, tmp_path) as (_, _, base):
        async with httpx.AsyncClient(base_url=base, headers=auth(token), timeout=30) as http:
            job_id = (
                await http.post("/v1/jobs", json=SLEEP, headers={"Idempotency-Key": "q"})
            ).json()["id"]
            answer = await http.get(f"/v1/jobs/{job_id}", params={"wait": 0.5})
            assert answer.status_code == 200
            assert answer.json()["state"] == "queued"
            # A finished job answers at once, whatever the wait: within 10 s (else this fails),
            # where a wait that ran its course would take 30.
            await finish(settings.database_url, job_id)
            done = await asyncio.wait_for(http.get(f"/v1/jobs/{job_id}", params={"wait": 30}), 10)
            assert done.json()["state"] == "succeeded"
            for wait in ("0", "61", "soon"):
                refused = await http.get(f"/v1/jobs/{job_id}", params={"wait": wait})
                assert refused.status_code == 422, wait
            unknown = await http.get(f"/v1/jobs/{uuid.uuid4()}", params={"wait": 1})
            assert unknown.status_code == 404


async def test_waiting_reads_are_not_shed(settings: Settings, store: Store, tmp_path: Path) -> None:
    """They hold no connection while they wait: a worker admitting 2 requests still takes
    submissions while 5 reads wait."""
    token = await make_client(store, "mixed")
    with running_api(settings.model_copy(update={"api_max_concurrency": 2}), tmp_path) as (
        _,
        _,
        base,
    ):
        async with httpx.AsyncClient(base_url=base, headers=auth(token), timeout=30) as http:
            job_id = (
                await http.post("/v1/jobs", json=SLEEP, headers={"Idempotency-Key": "x"})
            ).json()["id"]
            waiting = [
                asyncio.create_task(http.get(f"/v1/jobs/{job_id}", params={"wait": 30}))
                for _ in range(5)
            ]
            await asyncio.sleep(0.3)
            for n in range(3):
                answer = await http.post(
                    "/v1/jobs", json=SLEEP, headers={"Idempotency-Key": f"y{n}"}
                )
                assert answer.status_code == 202, answer.text
            await finish(settings.database_url, job_id)
            assert {(await task).json()["state"] for task in waiting} == {"succeeded"}
    assert await factories.count(store, tables.jobs) == 4
