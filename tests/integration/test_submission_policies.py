"""Order and submission policies on the submission side (SPEC §22, docs/flow-control.md),
against real PostgreSQL through the API: the deduplication window and its two answers, the
debounce (its payload, its start, its bound, a started job handing its key over, two racing
submissions), the policies' fields in the fingerprint and their 422, and a sequence's accept
and release by a cancel. Sequences under consumers: test_sequences.py; throttles:
test_throttle.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import auth

BASE_URL = "http://jobrelay.test"


class Edit(BaseModel):
    doc: str = "d"
    text: str = ""


def handler(context: Any, payload: Any) -> dict[str, Any]:
    return {}


def policy_registry() -> Registry:
    registry = Registry()
    registry.job("doc.index", Edit)(handler)
    registry.job(
        "doc.report", Edit, unique=lambda payload: f"report-{payload.doc}", unique_for=600
    )(handler)
    registry.job("doc.ordered", Edit, sequence=lambda payload: payload.doc)(handler)
    return registry


@pytest.fixture
async def api(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    from jobrelay.api.app import create_app

    app = create_app(
        settings.model_copy(update={"api_max_concurrency": 0}),
        store=store,
        registry=policy_registry(),
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


async def rows(store: Store, sql: str, **params: Any) -> list[Any]:
    async with store.transaction() as connection:
        result = await connection.execute(text(sql), params)
        return list(result) if result.returns_rows else []


async def end(store: Store, job_id: str, state: str = "succeeded", ago: float = 0.0) -> None:
    """The job ended ``ago`` seconds ago (as its consumer would have left it)."""
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = :state, "
        "finished_at = now() - make_interval(secs => :ago) WHERE id = :id",
        id=uuid.UUID(job_id),
        state=state,
        ago=ago,
    )


def submit(type: str = "doc.index", text: str = "", **fields: Any) -> dict[str, Any]:
    return {"type": type, "payload": {"doc": "d", "text": text}, **fields}


async def count_jobs(store: Store) -> int:
    return len(await rows(store, "SELECT id FROM jobrelay.jobs"))


# --- the deduplication window --------------------------------------------------------------


async def test_a_window_answers_with_a_job_that_ended_within_it_and_not_after(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    fields = {"unique_key": "daily", "unique_for_seconds": 600}
    first = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "w1"))
    assert first.status_code == 202
    await end(store, first.json()["id"], ago=60)
    again = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "w2"))
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    assert again.json()["deduplicated"] is True and again.json()["state"] == "succeeded"
    # Without the window the unique key holds only while a job is live: a new job.
    plain = await api.post("/v1/jobs", json=submit(unique_key="daily"), headers=auth(alice, "w3"))
    assert plain.status_code == 202
    await end(store, plain.json()["id"], ago=700)
    await end(store, first.json()["id"], ago=700)
    # Both ended before the window: the key is free again.
    later = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "w4"))
    assert later.status_code == 202 and later.json()["id"] not in {
        first.json()["id"],
        plain.json()["id"],
    }


async def test_a_cancelled_job_does_not_hold_the_window_and_a_quarantined_one_does(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    fields = {"unique_key": "k", "unique_for_seconds": 600}
    cancelled = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "c1"))
    await end(store, cancelled.json()["id"], "cancelled")
    made = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "c2"))
    assert made.status_code == 202
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = 'quarantined', finished_at = now(), "
        "last_error_code = 'boom' WHERE id = :id",
        id=uuid.UUID(made.json()["id"]),
    )
    held = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "c3"))
    assert (held.status_code, held.json()["id"]) == (200, made.json()["id"])


async def test_the_types_window_applies_to_its_unique_key(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    first = await api.post("/v1/jobs", json=submit("doc.report"), headers=auth(alice, "t1"))
    assert first.json()["unique_key"] == "report-d"
    await end(store, first.json()["id"], ago=30)
    again = await api.post("/v1/jobs", json=submit("doc.report"), headers=auth(alice, "t2"))
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])


async def test_reject_answers_409_duplicate_job_naming_the_job_and_writes_nothing(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    fields = {"unique_key": "once", "on_duplicate": "reject"}
    first = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "r1"))
    assert first.status_code == 202
    refused = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "r2"))
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "duplicate_job"
    assert refused.json()["job_id"] == first.json()["id"]
    # The first submission's retry is its own job again, not a duplicate.
    retried = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "r1"))
    assert (retried.status_code, retried.json()["id"]) == (200, first.json()["id"])
    batch = await api.post(
        "/v1/jobs/batch",
        json={"jobs": [{**submit(**fields), "idempotency_key": "r3"}]},
        headers=auth(alice),
    )
    assert batch.json()["results"][0]["status"] == 409
    assert batch.json()["results"][0]["error"]["code"] == "duplicate_job"
    assert await count_jobs(store) == 1


# --- debounce ------------------------------------------------------------------------------


async def outbox_due(store: Store, job_id: str) -> list[datetime]:
    found = await rows(
        store, "SELECT available_at FROM jobrelay.outbox WHERE job_id = :id", id=uuid.UUID(job_id)
    )
    return [row.available_at for row in found]


async def test_a_debounce_takes_the_last_payload_and_moves_the_start_within_its_bound(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    fields = {"unique_key": "doc-d", "debounce_seconds": 30, "debounce_max_seconds": 45}
    first = await api.post("/v1/jobs", json=submit(text="a", **fields), headers=auth(alice, "d1"))
    assert first.status_code == 202
    job = first.json()
    created = datetime.fromisoformat(job["created_at"])
    assert datetime.fromisoformat(job["run_at"]) >= created + timedelta(seconds=30)
    # Pushed back in time, as if 20 s had passed: the next edit moves the start to now + 30,
    # which the bound (created + 45) cuts.
    await rows(
        store,
        "UPDATE jobrelay.jobs SET created_at = created_at - interval '20 seconds' WHERE id = :id",
        id=uuid.UUID(job["id"]),
    )
    second = await api.post("/v1/jobs", json=submit(text="b", **fields), headers=auth(alice, "d2"))
    assert (second.status_code, second.json()["id"]) == (200, job["id"])
    assert second.json()["debounced"] is True
    assert second.json()["payload"]["text"] == "b"
    moved = datetime.fromisoformat(second.json()["run_at"])
    assert moved == datetime.fromisoformat(job["created_at"]) - timedelta(seconds=20) + timedelta(
        seconds=45
    )
    # The job and its outbox row are due at that time; one job, the last payload.
    assert await outbox_due(store, job["id"]) == [moved]
    read = await api.get(f"/v1/jobs/{job['id']}", headers=auth(alice))
    assert (
        read.json()["payload"]["text"] == "b"
        and read.json()["available_at"] == (second.json()["available_at"])
    )
    assert await count_jobs(store) == 1


async def test_a_debounce_of_a_started_job_makes_a_new_one_that_holds_the_key(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    fields = {"unique_key": "doc-s", "debounce_seconds": 5}
    first = await api.post("/v1/jobs", json=submit(text="a", **fields), headers=auth(alice, "s1"))
    started = first.json()["id"]
    await rows(  # the relay took its outbox row: it may be delivered at any moment
        store,
        "UPDATE jobrelay.outbox SET publish_attempts = 1 WHERE job_id = :id",
        id=uuid.UUID(started),
    )
    second = await api.post("/v1/jobs", json=submit(text="b", **fields), headers=auth(alice, "s2"))
    assert second.status_code == 202 and second.json()["id"] != started
    assert second.json()["unique_key"] == "doc-s" and second.json()["payload"]["text"] == "b"
    old = await api.get(f"/v1/jobs/{started}", headers=auth(alice))
    assert old.json()["unique_key"] is None and old.json()["payload"]["text"] == "a"
    third = await api.post("/v1/jobs", json=submit(text="c", **fields), headers=auth(alice, "s3"))
    assert (third.json()["id"], third.json()["debounced"]) == (second.json()["id"], True)


async def test_two_debounces_racing_on_two_connections_make_one_job_with_one_of_their_payloads(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    for round_ in range(10):
        fields = {"unique_key": f"race-{round_}", "debounce_seconds": 60}
        answers = await asyncio.gather(
            api.post(
                "/v1/jobs", json=submit(text="x", **fields), headers=auth(alice, f"x{round_}")
            ),
            api.post(
                "/v1/jobs", json=submit(text="y", **fields), headers=auth(alice, f"y{round_}")
            ),
        )
        assert sorted(answer.status_code for answer in answers) == [200, 202]
        assert len({answer.json()["id"] for answer in answers}) == 1
        debounced = next(answer for answer in answers if answer.status_code == 200)
        assert debounced.json()["debounced"] is True
        stored = await rows(
            store,
            "SELECT payload FROM jobrelay.jobs WHERE unique_key = :key",
            key=fields["unique_key"],
        )
        # The later of the two (the debounce) wrote last: its payload is the job's.
        assert [row.payload["text"] for row in stored] == [debounced.json()["payload"]["text"]]


# --- the fields' rules and the fingerprint -------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"debounce_seconds": 5}, "debounce_seconds needs a unique_key"),
        ({"unique_for_seconds": 5}, "unique_for_seconds needs a unique_key"),
        ({"on_duplicate": "reject"}, "on_duplicate needs a unique_key"),
        (
            {"unique_key": "u", "debounce_seconds": 5, "delay_seconds": 3},
            "debounce_seconds decides when the job runs",
        ),
        (
            {"unique_key": "u", "debounce_seconds": 5, "debounce_max_seconds": 2},
            "debounce_max_seconds is at least debounce_seconds",
        ),
        ({"unique_key": "u", "debounce_max_seconds": 2}, "debounce_max_seconds needs"),
    ],
)
async def test_policies_that_do_not_go_together_are_a_422_invalid_policy(
    api: httpx.AsyncClient, alice: str, store: Store, fields: dict[str, Any], says: str
) -> None:
    response = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "bad"))
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_policy"
    assert says in response.json()["detail"]
    assert await count_jobs(store) == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"sequence_key": ""},
        {"sequence_key": "s" * 201},
        {"unique_key": "u", "unique_for_seconds": 0},
        {"unique_key": "u", "debounce_seconds": -1},
        {"unique_key": "u", "on_duplicate": "ignore"},
        {"throttle_key": ""},
    ],
)
async def test_a_policy_out_of_range_is_a_422_validation_error(
    api: httpx.AsyncClient, alice: str, store: Store, fields: dict[str, Any]
) -> None:
    response = await api.post("/v1/jobs", json=submit(**fields), headers=auth(alice, "bad"))
    assert (response.status_code, response.json()["code"]) == (422, "validation_error")
    assert await count_jobs(store) == 0


async def test_the_policies_are_part_of_the_idempotency_fingerprint(
    api: httpx.AsyncClient, alice: str
) -> None:
    first = await api.post("/v1/jobs", json=submit(sequence_key="a"), headers=auth(alice, "f1"))
    same = await api.post("/v1/jobs", json=submit(sequence_key="a"), headers=auth(alice, "f1"))
    other = await api.post("/v1/jobs", json=submit(sequence_key="b"), headers=auth(alice, "f1"))
    assert (first.status_code, same.status_code, other.status_code) == (202, 200, 409)
    assert same.json()["id"] == first.json()["id"]
    assert other.json()["code"] == "idempotency_conflict"


# --- a sequence's accept and its release by a cancel ----------------------------------------


async def sequence_rows(store: Store, key: str) -> list[Any]:
    return await rows(
        store,
        "SELECT j.id, j.sequence_waits, j.state, "
        "EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id) AS has_outbox "
        "FROM jobrelay.jobs j WHERE j.sequence_key = :key ORDER BY j.sequence_no",
        key=key,
    )


async def test_a_sequences_later_jobs_wait_without_an_outbox_row_until_the_one_ahead_ends(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    ids = []
    for index, kind in enumerate(("doc.ordered", "doc.index", "doc.ordered")):
        answer = await api.post(
            "/v1/jobs", json=submit(kind, sequence_key="d"), headers=auth(alice, f"q{index}")
        )
        assert (answer.status_code, answer.json()["sequence_key"]) == (202, "d")
        ids.append(answer.json()["id"])
    found = await sequence_rows(store, "d")
    assert [str(row.id) for row in found] == ids
    assert [(row.sequence_waits, row.has_outbox) for row in found] == [
        (False, True),
        (True, False),
        (True, False),
    ]
    # The head quarantined: it blocks the others, which name it.
    await rows(
        store,
        "UPDATE jobrelay.jobs SET state = 'quarantined', finished_at = now(), "
        "last_error_code = 'boom' WHERE id = :id",
        id=uuid.UUID(ids[0]),
    )
    blocked = await api.get(f"/v1/jobs/{ids[2]}", headers=auth(alice))
    assert blocked.json()["blocked_by"] == ids[0]
    # Its cancel unblocks the sequence: the next one (only) is released, with its journal entry.
    cancelled = await api.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth(alice))
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    found = await sequence_rows(store, "d")
    assert [(row.sequence_waits, row.has_outbox) for row in found][1:] == [
        (False, True),
        (True, False),
    ]
    events = await api.get(f"/v1/jobs/{ids[1]}/events", headers=auth(alice))
    assert "released" in [event["event"] for event in events.json()["events"]]
    waiting = await api.get(f"/v1/jobs/{ids[2]}", headers=auth(alice))
    assert waiting.json()["blocked_by"] is None and waiting.json()["state"] == "queued"


async def test_a_cancel_of_a_waiting_job_leaves_the_ones_after_it_waiting_for_the_head(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    ids = []
    for index in range(3):
        answer = await api.post(
            "/v1/jobs", json=submit(sequence_key="m"), headers=auth(alice, f"m{index}")
        )
        ids.append(answer.json()["id"])
    await api.post(f"/v1/jobs/{ids[1]}/cancel", headers=auth(alice))
    found = await sequence_rows(store, "m")
    assert [(row.state, row.sequence_waits, row.has_outbox) for row in found] == [
        ("queued", False, True),
        ("cancelled", True, False),
        ("queued", True, False),
    ]


async def test_the_types_unique_key_is_the_one_a_refusal_or_a_debounce_needs(
    api: httpx.AsyncClient, alice: str
) -> None:
    first = await api.post(
        "/v1/jobs", json=submit("doc.report", on_duplicate="reject"), headers=auth(alice, "u1")
    )
    refused = await api.post(
        "/v1/jobs", json=submit("doc.report", on_duplicate="reject"), headers=auth(alice, "u2")
    )
    assert first.status_code == 202 and first.json()["unique_key"] == "report-d"
    assert (refused.status_code, refused.json()["code"]) == (409, "duplicate_job")
    assert refused.json()["job_id"] == first.json()["id"]


async def test_a_batch_answers_a_refused_duplicate_with_its_job_and_a_debounce_as_debounced(
    api: httpx.AsyncClient, alice: str
) -> None:
    debounce = {"unique_key": "b-doc", "debounce_seconds": 60}
    reject = {"unique_key": "b-once", "on_duplicate": "reject"}
    first = await api.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                {**submit(text="a", **debounce), "idempotency_key": "b1"},
                {**submit(**reject), "idempotency_key": "b2"},
            ]
        },
        headers=auth(alice),
    )
    assert [item["status"] for item in first.json()["results"]] == [202, 202]
    made = [item["job"]["id"] for item in first.json()["results"]]
    again = await api.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                {**submit(text="b", **debounce), "idempotency_key": "b3"},
                {**submit(**reject), "idempotency_key": "b4"},
            ]
        },
        headers=auth(alice),
    )
    debounced, refused = again.json()["results"]
    assert (debounced["status"], debounced["job"]["id"]) == (200, made[0])
    assert debounced["job"]["debounced"] is True and debounced["job"]["payload"]["text"] == "b"
    assert (refused["status"], refused["error"]["code"]) == (409, "duplicate_job")
    assert refused["error"]["job_id"] == made[1]
