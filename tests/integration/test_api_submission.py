"""The accept path against real PostgreSQL: idempotency, atomicity, isolation between clients."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import api_client, auth
from tests.support import factories

JS = {"type": "catalog.export", "payload": {"course": "JavaScript"}}
MD = {"type": "catalog.export", "payload": {"course": "Markdown"}}


async def count(store: Store, table: str, job_id: str | None = None) -> int:
    """Rows of ``table``, or only those of one job."""
    chosen = factories.table_named(table)
    column = chosen.c.id if table == "jobs" else chosen.c.job_id
    return await factories.count(store, chosen, *([column == job_id] if job_id else []))


async def test_a_new_key_is_accepted_with_202_and_a_location(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    response = await api.post("/v1/jobs", json=JS, headers=auth(alice, "export-1"))

    assert response.status_code == 202
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] == "queued" and job["attempts"] == 0 and job["max_attempts"] == 3
    assert await count(store, "jobs") == 1
    assert await count(store, "outbox", job["id"]) == 1
    events = (await api.get(f"/v1/jobs/{job['id']}/events", headers=auth(alice))).json()["events"]
    assert [e["event"] for e in events] == ["received"]


async def test_the_source_scenario_same_key_same_job_other_course_conflicts(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    first = await api.post("/v1/jobs", json=JS, headers=auth(alice, "export-js"))
    again = await api.post("/v1/jobs", json=JS, headers=auth(alice, "export-js"))
    conflict = await api.post("/v1/jobs", json=MD, headers=auth(alice, "export-js"))

    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    assert conflict.status_code == 409
    assert conflict.headers["content-type"].startswith("application/problem+json")
    assert conflict.json()["code"] == "idempotency_conflict"
    assert await count(store, "jobs") == 1
    assert await count(store, "outbox") == 1
    assert await count(store, "job_events") == 0  # its received entry is its row
    stored = (await api.get(first.headers["location"], headers=auth(alice))).json()
    assert stored["payload"] == {"course": "JavaScript"}


async def test_payload_key_order_does_not_make_a_different_request(
    api: httpx.AsyncClient, alice: str
) -> None:
    body = {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}}
    reordered = {"payload": {"times": 1, "mode": "transient"}, "type": "demo.fail"}
    first = await api.post("/v1/jobs", json=body, headers=auth(alice, "k"))
    second = await api.post("/v1/jobs", json=reordered, headers=auth(alice, "k"))
    assert (first.status_code, second.status_code) == (202, 200)


async def test_fifty_concurrent_identical_posts_make_one_job(
    settings: Settings, alice: str, store: Store
) -> None:
    # All fifty at once, none shed (the default would admit twice the pool).
    async with api_client(settings.model_copy(update={"api_max_concurrency": 0}), store) as api:
        responses = await asyncio.gather(
            *(api.post("/v1/jobs", json=JS, headers=auth(alice, "burst")) for _ in range(50))
        )

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 49 + [202]
    assert len({r.json()["id"] for r in responses}) == 1
    assert await count(store, "jobs") == 1
    assert await count(store, "outbox") == 1
    assert await count(store, "job_events") == 0  # its received entry is its row


async def test_a_failure_between_the_writes_leaves_no_job_no_outbox_row_no_event(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    await factories.failing_inserts(store, "outbox")

    response = await api.post("/v1/jobs", json=JS, headers=auth(alice, "doomed"))

    assert response.status_code == 500
    assert response.json()["code"] == "internal_error"
    assert "injected" not in response.text
    assert await count(store, "jobs") == 0
    assert await count(store, "outbox") == 0
    assert await count(store, "job_events") == 0


async def test_another_clients_job_is_not_found_and_keys_do_not_collide(
    api: httpx.AsyncClient, alice: str, bob: str, store: Store
) -> None:
    alices = await api.post("/v1/jobs", json=JS, headers=auth(alice, "shared-key"))
    bobs = await api.post("/v1/jobs", json=MD, headers=auth(bob, "shared-key"))

    assert alices.status_code == bobs.status_code == 202
    assert alices.json()["id"] != bobs.json()["id"]
    job_url = alices.headers["location"]
    for path in (job_url, f"{job_url}/events"):
        foreign = await api.get(path, headers=auth(bob))
        assert foreign.status_code == 404
        assert foreign.json()["code"] == "job_not_found"
    assert (await api.post(f"{job_url}/cancel", headers=auth(bob))).status_code == 404
    bobs_list = (await api.get("/v1/jobs", headers=auth(bob))).json()["items"]
    assert [job["id"] for job in bobs_list] == [bobs.json()["id"]]


async def test_an_unknown_job_id_is_404(api: httpx.AsyncClient, alice: str) -> None:
    response = await api.get(f"/v1/jobs/{uuid.uuid4()}", headers=auth(alice))
    assert response.status_code == 404
    assert response.json()["type"].endswith("/job_not_found")


async def test_cancel_moves_a_queued_job_and_refuses_twice(
    api: httpx.AsyncClient, alice: str
) -> None:
    job = (await api.post("/v1/jobs", json=JS, headers=auth(alice, "c1"))).json()

    cancelled = await api.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(alice))
    again = await api.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(alice))

    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    assert again.status_code == 409
    assert again.json()["code"] == "not_cancellable"
    events = (await api.get(f"/v1/jobs/{job['id']}/events", headers=auth(alice))).json()["events"]
    assert [e["event"] for e in events] == ["received", "cancelled"]


async def test_listing_pages_through_own_jobs_newest_first_with_filters(
    api: httpx.AsyncClient, alice: str
) -> None:
    created = []
    for number in range(7):
        body = {"type": "demo.sleep", "payload": {"seconds": number}}
        created.append(
            (await api.post("/v1/jobs", json=body, headers=auth(alice, f"s{number}"))).json()["id"]
        )
    await api.post("/v1/jobs", json=JS, headers=auth(alice, "other-type"))

    seen: list[str] = []
    cursor = None
    while True:
        params = {"type": "demo.sleep", "limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await api.get("/v1/jobs", params=params, headers=auth(alice))).json()
        seen += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert seen == list(reversed(created))
    queued = (await api.get("/v1/jobs", params={"state": "queued"}, headers=auth(alice))).json()
    assert len(queued["items"]) == 8
    bad = await api.get("/v1/jobs", params={"cursor": "not-a-cursor"}, headers=auth(alice))
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor"


async def test_explicit_max_attempts_is_kept(api: httpx.AsyncClient, alice: str) -> None:
    body = JS | {"max_attempts": 5}
    job = (await api.post("/v1/jobs", json=body, headers=auth(alice, "m5"))).json()
    assert job["max_attempts"] == 5


async def test_admin_stats_count_jobs_and_need_an_admin(
    api: httpx.AsyncClient, alice: str, admin: str
) -> None:
    await api.post("/v1/jobs", json=JS, headers=auth(alice, "st"))

    assert (await api.get("/v1/admin/stats")).status_code == 401
    assert (await api.get("/v1/admin/stats", headers=auth(alice))).status_code == 403
    stats = (await api.get("/v1/admin/stats", headers=auth(admin))).json()
    assert stats["jobs_by_state"]["queued"] == 1
    assert stats["outbox"]["unpublished"] == 1


@pytest.mark.parametrize("path", ["/healthz", "/openapi.json", "/metrics"])
async def test_public_endpoints_answer_without_a_token(api: httpx.AsyncClient, path: str) -> None:
    assert (await api.get(path)).status_code == 200


async def test_readyz_reports_an_unreachable_broker(api: httpx.AsyncClient) -> None:
    response = await api.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "broker": "unavailable"}
