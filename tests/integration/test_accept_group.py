"""The accept's group commit (db/store.py, ``Store.accept_job``): single submissions that arrive
together share one insert, and each is answered as if it had come alone."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import text

from jobrelay.core.jobs import JobRequest
from jobrelay.db.accept import AcceptResult
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.consumer_kit import new_client


def sleep_request(key: str, seconds: float = 0) -> JobRequest:
    return JobRequest(key, "demo.sleep", {"seconds": seconds}, 3)


async def accept_together(
    store: Store, asked: list[tuple[uuid.UUID, JobRequest, str | None]]
) -> list[AcceptResult]:
    return list(
        await asyncio.gather(
            *(
                store.accept_job(client, request, traceparent=trace)
                for client, request, trace in asked
            )
        )
    )


async def test_submissions_of_several_clients_share_one_insert_each_its_own_job(
    store: Store,
) -> None:
    alice, bob = await new_client(store), await new_client(store)
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    asked = [
        (alice, sleep_request("a1"), trace),
        (bob, sleep_request("a1", 1), None),  # the same key, another client: another job
        (alice, sleep_request("a2"), None),
    ]
    groups_before = store._inserts.groups

    results = await accept_together(store, asked)

    assert store._inserts.groups == groups_before + 1, "one statement for the three"
    assert [result.created for result in results] == [True, True, True]
    assert [result.job.client_id for result in results] == [alice, bob, alice]
    rows = await store.fetch_all(
        text("SELECT id, client_id, idempotency_key, traceparent, payload FROM jobrelay.jobs")
    )
    stored = {row.id: row for row in rows}
    for (client, request, traceparent), result in zip(asked, results, strict=True):
        row = stored[result.job.id]
        assert (row.client_id, row.idempotency_key) == (client, request.idempotency_key)
        assert row.traceparent == traceparent
        assert row.payload == request.payload


async def test_a_key_repeated_in_a_group_makes_one_job_and_a_conflict_is_told(
    store: Store,
) -> None:
    alice = await new_client(store)
    asked = [
        (alice, sleep_request("k"), None),
        (alice, sleep_request("k"), None),
        (alice, sleep_request("k", 2), None),
    ]

    first, again, other = await accept_together(store, asked)

    made = [result for result in (first, again, other) if result.created]
    assert len(made) == 1 and made[0] in (first, again)
    assert first.job.id == again.job.id == other.job.id
    assert other.conflict and not other.created
    assert len(await store.fetch_all(text("SELECT id FROM jobrelay.jobs"))) == 1


async def test_a_row_that_fails_the_groups_insert_fails_alone(store: Store) -> None:
    alice = await new_client(store)
    await factories.failing_inserts(store, "jobs", when="NEW.idempotency_key = 'doomed'")
    asked = [(alice, sleep_request(key), None) for key in ("fine-1", "doomed", "fine-2")]

    results = await asyncio.gather(
        *(store.accept_job(client, request) for client, request, _ in asked),
        return_exceptions=True,
    )

    fine_1, doomed, fine_2 = results
    assert isinstance(doomed, Exception) and "injected failure" in str(doomed)
    assert isinstance(fine_1, AcceptResult) and fine_1.created
    assert isinstance(fine_2, AcceptResult) and fine_2.created
    keys = await store.fetch_all(text("SELECT idempotency_key FROM jobrelay.jobs ORDER BY 1"))
    assert [row.idempotency_key for row in keys] == ["fine-1", "fine-2"]
