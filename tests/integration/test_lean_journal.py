"""The lean journal's statements on PostgreSQL (docs/life-of-a-job.md, "The journal"): the
entries a job's rows tell keep their place when a row forgets them."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from jobrelay.core.execution import Claimed, LeaseTerms
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.support.consumer_kit import new_client, scalar, submit


async def journal(store: Store, job_id: uuid.UUID) -> list[tuple[int, str, int, str | None]]:
    rows = await store.fetch_all(
        text(
            "SELECT seq, event, attempt, detail FROM jobrelay.job_journal"
            " WHERE job_id = :id ORDER BY seq"
        ),
        id=job_id,
    )
    return [(row.seq, row.event, row.attempt, row.detail) for row in rows]


async def published_job(store: Store, *, state: str = "queued") -> uuid.UUID:
    """A job whose outbox row was leased and confirmed, published two hours ago."""
    job_id = await submit(store, await new_client(store), "demo.sleep", {"seconds": 0})
    relay = RelayStore(store)
    assert await relay.mark_published(await relay.lease_batch(10, 30.0)) == 1
    async with store.transaction() as connection:
        await connection.execute(
            text(
                "UPDATE jobrelay.outbox SET published_at = now() - interval '2 hours'"
                " WHERE job_id = :id"
            ),
            {"id": job_id},
        )
        if state != "queued":
            await connection.execute(
                text("UPDATE jobrelay.jobs SET state = :state, finished_at = now() WHERE id = :id"),
                {"id": job_id, "state": state},
            )
    return job_id


async def test_a_live_jobs_published_row_deleted_by_retention_leaves_its_entry_in_the_journal(
    store: Store,
) -> None:
    job_id = await published_job(store)
    before = await journal(store, job_id)
    assert [event for _, event, _, _ in before] == ["received", "published"]

    assert await RelayStore(store).delete_published(3600, 10) == 1

    assert (
        await scalar(store, "SELECT count(*) FROM jobrelay.outbox WHERE job_id = :id", id=job_id)
        == 0
    )
    assert await journal(store, job_id) == before
    written = await scalar(
        store, "SELECT count(*) FROM jobrelay.job_events WHERE job_id = :id", id=job_id
    )
    assert written == 1, "the published entry is a job_events row now"


async def test_a_finished_jobs_published_rows_stay_until_the_job_goes(store: Store) -> None:
    job_id = await published_job(store, state="cancelled")

    assert await RelayStore(store).delete_published(3600, 10) == 0

    assert [event for _, event, _, _ in await journal(store, job_id)] == ["received", "published"]


async def test_a_place_drawn_twice_never_makes_a_claim_fail(store: Store) -> None:
    """A lease whose unflushed commit a crash lost may have its journal place drawn again
    (docs/failover.md): an entry journaled from a row keeps its place in seq, never as an id
    that could be taken."""
    job_id = await submit(store, await new_client(store), "demo.sleep", {"seconds": 0})
    async with store.transaction() as connection:
        taken = (
            await connection.execute(
                text(
                    "INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)"
                    " VALUES (:id, 'held', 0, 'a row that took the place') RETURNING id"
                ),
                {"id": job_id},
            )
        ).scalar_one()
        # As if an earlier attempt's claim had drawn the same place.
        await connection.execute(
            text(
                "UPDATE jobrelay.jobs SET claimed_seq = :taken, claimed_at = now(),"
                " claimed_by = 'an earlier consumer' WHERE id = :id"
            ),
            {"id": job_id, "taken": taken},
        )

    claim = await PgExecutionStore(store, queue=None).claim(job_id, LeaseTerms.fresh(30))

    assert isinstance(claim, Claimed)
    events = [event for _, event, _, _ in await journal(store, job_id)]
    assert events.count("claimed") == 2, events
