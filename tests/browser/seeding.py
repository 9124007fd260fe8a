"""The work the browser tests find in their system: a few hundred real jobs submitted through
the API and run by the dispatcher and the consumer (most succeed, some only after a retry, some
are quarantined), a few delayed for an hour, a job whose payload, key and client name hold
markup, and an hour of finished jobs written as factories rows (``tests/support/factories.py``)
so that the overview's chart shows the hour a running system would have behind it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import func

from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.conftest import auth, make_client
from tests.support import factories
from tests.support.consumer_kit import rows
from tests.support.waiting import eventually

HOSTILE_TEXT = "<script>alert(1)</script><img src=x onerror=alert(2)>"
HOSTILE_CLIENT = "<img src=x onerror=alert(3)>"
HOSTILE_KEY = "<script>alert(4)</script>"
COURSES = ("JavaScript", "Python", "Go", "Rust", "SQL", "Markdown")
SLEEPS = 180
EXPORTS = 60
RETRIED = 30  # fail once (transient), then succeed
POISONED = 12  # fail once (permanent): quarantined, a replay succeeds
EXHAUSTED = 6  # fail every attempt: quarantined when none is left
DELAYED = 15  # due in an hour: stay queued


@dataclass
class Seeded:
    admin_token: str
    client_token: str
    client_name: str
    retried: list[uuid.UUID] = field(default_factory=list)
    poisoned: list[uuid.UUID] = field(default_factory=list)
    hostile: uuid.UUID | None = None


def _batch() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    jobs += [{"type": "demo.sleep", "payload": {"seconds": 0}} for _ in range(SLEEPS)]
    jobs += [
        {"type": "catalog.export", "payload": {"course": COURSES[n % len(COURSES)]}}
        for n in range(EXPORTS)
    ]
    jobs += [
        {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}} for _ in range(RETRIED)
    ]
    jobs += [
        {"type": "demo.fail", "payload": {"mode": "permanent", "times": 1}, "max_attempts": 1}
        for _ in range(POISONED)
    ]
    jobs += [
        {"type": "demo.fail", "payload": {"mode": "transient", "times": 9}, "max_attempts": 2}
        for _ in range(EXHAUSTED)
    ]
    jobs += [
        {"type": "demo.sleep", "payload": {"seconds": 1}, "delay_seconds": 3600}
        for _ in range(DELAYED)
    ]
    return [{"idempotency_key": f"seed-{n}", **job} for n, job in enumerate(jobs)]


async def _history(store: Store, client_id: uuid.UUID) -> None:
    """An hour of finished jobs, a varying number each minute, a few of them quarantined."""
    for minutes_ago in range(1, 60):
        finished = func.now() - timedelta(minutes=minutes_ago, seconds=20)
        times = {"finished_at": finished, "created_at": finished, "updated_at": finished}
        succeeded = 60 + (minutes_ago * 37) % 71
        await factories.jobs(
            store, succeeded, client_id=client_id, state=JobState.SUCCEEDED, **times
        )
        if minutes_ago % 4 == 2:
            await factories.jobs(
                store,
                2 + minutes_ago % 5,
                client_id=client_id,
                state=JobState.QUARANTINED,
                job_type="demo.fail",
                payload={"mode": "permanent", "times": 1},
                last_error="PermanentError: demo failure on attempt 1 of 1",
                **times,
            )


async def seed(base: str, store: Store) -> Seeded:
    seeded = Seeded(
        admin_token=await make_client(store, "ops-admin", admin=True),
        client_token=await make_client(store, "shop-backend"),
        client_name="shop-backend",
    )
    hostile_token = await make_client(store, HOSTILE_CLIENT)
    (shop,) = await rows(store, "SELECT id FROM jobrelay.clients WHERE name = 'shop-backend'")
    await _history(store, shop.id)
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:
        answer = await api.post(
            "/v1/jobs/batch", json={"jobs": _batch()}, headers=auth(seeded.client_token)
        )
        assert answer.status_code == 200, answer.text
        made = [result["job"] for result in answer.json()["results"]]
        assert len(made) == len(_batch())
        hostile = await api.post(
            "/v1/jobs",
            json={"type": "catalog.export", "payload": {"course": HOSTILE_TEXT}},
            headers=auth(hostile_token, HOSTILE_KEY),
        )
        assert hostile.status_code == 202, hostile.text
    seeded.hostile = uuid.UUID(hostile.json()["id"])
    fails = [job for job in made if job["type"] == "demo.fail"]
    seeded.retried = [uuid.UUID(job["id"]) for job in fails[:RETRIED]]
    seeded.poisoned = [uuid.UUID(job["id"]) for job in fails[RETRIED : RETRIED + POISONED]]
    await eventually(lambda: _all_ran(store), within=120, what="the seeded jobs to finish")
    return seeded


async def _all_ran(store: Store) -> bool:
    """Every job not delayed has finished (the schedules' own jobs aside)."""
    (waiting,) = await rows(
        store,
        "SELECT count(*) AS n FROM jobrelay.jobs j JOIN jobrelay.clients c ON c.id = j.client_id "
        "WHERE j.state IN ('queued', 'running', 'retrying') AND j.run_at IS NULL "
        "AND c.name <> 'jobrelay-scheduler'",
    )
    return bool(waiting.n == 0)
