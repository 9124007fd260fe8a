"""Delayed jobs (``run_at`` / ``delay_seconds``) and batch submission, against real PostgreSQL
and, for "not claimed before its time", a real dispatcher and consumer."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select, text

from jobrelay.core.clients import RateLimit
from jobrelay.db import tables
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support import factories
from tests.support.system import System

JS = {"type": "catalog.export", "payload": {"course": "JavaScript"}}
SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}
SECONDS = ("--payload", '{"seconds": 0}')


def parsed(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def outbox_of(store: Store, job_id: str) -> list[Any]:
    async with factories.connection(store) as conn:
        query = select(tables.outbox).where(tables.outbox.c.job_id == uuid.UUID(job_id))
        return list((await conn.execute(query)).all())


# --- delayed jobs -------------------------------------------------------------------------------


async def test_a_delayed_job_is_due_at_its_time_and_its_outbox_row_too(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    run_at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    answer = await api.post(
        "/v1/jobs", json={**JS, "run_at": run_at.isoformat()}, headers=auth(alice, "later")
    )
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert parsed(job["run_at"]) == run_at == parsed(job["available_at"])
    assert job["state"] == "queued"
    [row] = await outbox_of(store, job["id"])
    assert row.available_at == run_at and row.published_at is None
    shown = (await api.get(f"/v1/jobs/{job['id']}", headers=auth(alice))).json()
    assert parsed(shown["run_at"]) == run_at


async def test_a_job_due_at_once_has_no_run_at(api: httpx.AsyncClient, alice: str) -> None:
    answer = await api.post("/v1/jobs", json=JS, headers=auth(alice, "now"))
    assert answer.status_code == 202 and answer.json()["run_at"] is None


async def test_the_due_time_is_part_of_the_request(api: httpx.AsyncClient, alice: str) -> None:
    delayed = {**JS, "delay_seconds": 60}
    first = await api.post("/v1/jobs", json=delayed, headers=auth(alice, "d"))
    await asyncio.sleep(0.05)
    # Retried later with the same delay: the same request (the delay, not its result, counts).
    again = await api.post("/v1/jobs", json=delayed, headers=auth(alice, "d"))
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    for other in ({**JS, "delay_seconds": 61}, JS, {**JS, "run_at": "2030-01-01T00:00:00Z"}):
        conflict = await api.post("/v1/jobs", json=other, headers=auth(alice, "d"))
        assert conflict.status_code == 409, other
        assert conflict.json()["code"] == "idempotency_conflict"


async def test_a_schedule_that_is_not_one_is_422(api: httpx.AsyncClient, alice: str) -> None:
    cases = [
        ({"run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}, "invalid_schedule"),
        ({"run_at": "2030-01-01T00:00:00"}, "invalid_schedule"),  # no offset
        ({"run_at": "next tuesday"}, "validation_error"),
        ({"delay_seconds": -1}, "validation_error"),
        ({"delay_seconds": 31_536_001}, "validation_error"),
    ]
    for extra, code in cases:
        answer = await api.post("/v1/jobs", json={**JS, **extra}, headers=auth(alice, "bad"))
        assert answer.status_code == 422, extra
        assert answer.json()["code"] == code, (extra, answer.json())


async def test_a_delayed_job_is_not_claimed_before_its_time(system: System) -> None:
    with system.running("delayed"):
        answer = await system.api.post(
            "/v1/jobs", json={**SLEEP, "delay_seconds": 2.5}, headers=auth(system.alice, "late")
        )
        job_id, run_at = answer.json()["id"], parsed(answer.json()["run_at"])
        now = await system.submit(SLEEP)
        await system.wait_for("succeeded", now, what="a job due at once")
        # Read with the database's clock: on a loaded machine the job due at once may take
        # longer than the delay, and then the delayed one is rightly running or done.
        seen = await system.store.fetch_one(
            text("SELECT state, clock_timestamp() AS at FROM jobrelay.jobs WHERE id = :id"),
            id=uuid.UUID(job_id),
        )
        if seen.at < run_at:
            assert seen.state == "queued"
        await system.wait_for("succeeded", job_id, what="the delayed job, once due")
    events = {entry.event: entry.at for entry in await system.store.job_events(uuid.UUID(job_id))}
    assert events["published"] >= run_at
    assert events["claimed"] >= run_at


# --- batches -------------------------------------------------------------------------------------


def item(key: str, body: dict[str, Any] = JS, **extra: Any) -> dict[str, Any]:
    return {"idempotency_key": key, **body, **extra}


async def test_a_batch_answers_each_item_in_order(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    before = await api.post("/v1/jobs", json=JS, headers=auth(alice, "old"))
    jobs = [
        item("new-1"),
        item("old"),  # the same request again: 200, that job
        item("old", {**JS, "payload": {"course": "Markdown"}}),  # another request: 409
        item("bad-type", {"type": "no.such.type", "payload": {}}),
        item("bad key with spaces"),
        {"type": "catalog.export"},  # no key
        item("new-2", SLEEP, delay_seconds=60),
        item("new-1"),  # twice in one batch: the job the first made
    ]
    answer = await api.post("/v1/jobs/batch", json={"jobs": jobs}, headers=auth(alice))
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [202, 200, 409, 422, 400, 422, 202, 200]
    assert results[1]["job"]["id"] == before.json()["id"]
    assert results[2]["error"]["code"] == "idempotency_conflict"
    assert results[3]["error"]["code"] == "unknown_job_type"
    assert results[4]["error"]["code"] == "idempotency_key_invalid"
    assert results[5]["error"]["code"] == "validation_error"
    assert results[6]["job"]["run_at"] is not None
    assert results[7]["job"]["id"] == results[0]["job"]["id"]
    new = [results[0]["job"]["id"], results[6]["job"]["id"]]
    for job_id in new:
        assert len(await outbox_of(store, job_id)) == 1
    assert await factories.count(store, tables.jobs) == 3


async def test_a_batch_is_1_to_1000_jobs_and_may_be_larger_than_one_job(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    for jobs in ([], [item(f"k{n}") for n in range(1001)]):
        answer = await api.post("/v1/jobs/batch", json={"jobs": jobs}, headers=auth(alice))
        assert answer.status_code == 422
    # 1,000 jobs of ~90 bytes: far past the single submission's 64 KiB.
    big = [item(f"k{n}", {**JS, "payload": {"course": "x" * 50}}) for n in range(1000)]
    assert len(json.dumps({"jobs": big})) > 65536
    answer = await api.post("/v1/jobs/batch", json={"jobs": big}, headers=auth(alice))
    assert answer.status_code == 200
    assert {r["status"] for r in answer.json()["results"]} == {202}
    assert await factories.count(store, tables.jobs) == 1000
    assert await factories.count(store, tables.outbox) == 1000


async def test_a_batch_past_its_byte_limit_is_413(settings: Any, store: Store, alice: str) -> None:
    from tests.conftest import api_client

    async with api_client(settings.model_copy(update={"max_batch_bytes": 2048}), store) as api:
        jobs = [item(f"k{n}") for n in range(40)]
        answer = await api.post("/v1/jobs/batch", json={"jobs": jobs}, headers=auth(alice))
        assert answer.status_code == 413
        assert answer.json()["code"] == "payload_too_large"
    assert await factories.count(store, tables.jobs) == 0


async def test_a_limited_batch_writes_nothing(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await ClientStore(store).set_client_rate_limit("alice", RateLimit(per_second=1, burst=3))
    first = await api.post(
        "/v1/jobs/batch", json={"jobs": [item(f"a{n}") for n in range(3)]}, headers=auth(alice)
    )
    assert first.status_code == 200
    second = await api.post(
        "/v1/jobs/batch", json={"jobs": [item(f"b{n}") for n in range(3)]}, headers=auth(alice)
    )
    assert second.status_code == 429
    assert int(second.headers["Retry-After"]) >= 1
    assert await factories.count(store, tables.jobs) == 3


def test_submit_on_the_command_line_takes_a_due_time(
    settings: Any, alice: str, tmp_path: Any
) -> None:
    from tests.support.processes import run_cli, running_api

    with running_api(settings, tmp_path) as (_, env, _):
        env = env | {"JOBRELAY_TOKEN": alice}
        later = run_cli(env, "submit", "demo.sleep", *SECONDS, "--delay", "10m", "--json")
        assert later.returncode == 0, later.stderr
        shown = json.loads(later.stdout)
        assert parsed(shown["run_at"]) > datetime.now(UTC) + timedelta(minutes=9)
        at = run_cli(
            env, "submit", "demo.sleep", *SECONDS, "--run-at", "2030-01-01T00:00:00Z", "--json"
        )
        assert parsed(json.loads(at.stdout)["run_at"]) == datetime(2030, 1, 1, tzinfo=UTC)
        for args, message in [
            (("--run-at", "2030-01-01T00:00:00"), "--run-at needs an offset"),
            (("--run-at", "soon"), "is not an RFC 3339 time"),
            (("--delay", "a while"), "--delay:"),
            (("--delay", "5m", "--run-at", "2030-01-01T00:00:00Z"), "not both"),
        ]:
            refused = run_cli(env, "submit", "demo.sleep", *SECONDS, *args)
            assert refused.returncode == 1 and message in refused.stderr, refused.stderr
            assert "Traceback" not in refused.stderr
