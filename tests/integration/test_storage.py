"""Storage that stays flat (docs/storage.md): the stats from the maintained totals equal a full
count after every kind of move, retention deletes finished jobs with everything they own, and
the operators' statements never read the finished jobs."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, text

from jobrelay.core.execution import Claimed, LeaseTerms
from jobrelay.core.jobs import JobRequest, Outcome, Quarantine, Succeeded
from jobrelay.core.states import TERMINAL_STATES, JobState
from jobrelay.db import queries as q, tables
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.relay import store_maintenance
from tests.support.waiting import eventually

LONG_AGO = func.now() - timedelta(days=10)
DAY = 24 * 3600.0


async def full_count(store: Store) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """What the stats must say, counted the slow way over every job."""
    rows = await store.fetch_all(text("SELECT state, last_error_code FROM jobrelay.jobs"))
    by_state = Counter(row.state for row in rows)
    quarantined = Counter(
        row.last_error_code or "unknown" for row in rows if row.state == "quarantined"
    )
    failed = Counter(
        row.last_error_code for row in rows if row.last_error_code and row.state != "quarantined"
    )
    return dict(by_state), dict(quarantined), dict(failed)


async def assert_stats_match_a_full_count(store: Store) -> None:
    stats = await store.stats()
    by_state, quarantined, failed = await full_count(store)
    assert {k: v for k, v in stats.jobs_by_state.items() if v} == by_state
    assert stats.quarantined_by_code == quarantined
    assert stats.failed_by_code == failed


async def test_the_stats_equal_a_full_count_after_every_kind_of_move(store: Store) -> None:
    # Inserted in every state (the insert trigger), with and without error codes.
    made: dict[JobState, list[Any]] = {}
    for state in JobState:
        made[state] = await factories.jobs(store, 4, state=state)
    await factories.jobs(store, 2, state=JobState.QUARANTINED, last_error_code="delivery_limit")
    await factories.jobs(store, 3, state=JobState.SUCCEEDED, last_error_code="unexpected_error")
    await factories.jobs(store, 2, state=JobState.RETRYING, last_error_code="unexpected_error")
    await assert_stats_match_a_full_count(store)

    # Moves into, out of and between finished states, and within one (the update trigger).
    quarantined = made[JobState.QUARANTINED]
    await factories.set_job(store, [quarantined[0].id], state=JobState.QUEUED, finished_at=None)
    finished = {"lease_token": None, "lease_until": None}
    await factories.set_job(
        store, [made[JobState.RUNNING][0].id], state=JobState.SUCCEEDED, **finished
    )
    await factories.set_job(store, [quarantined[1].id], last_error_code="attempts_exhausted")
    await factories.set_job(store, [made[JobState.QUEUED][0].id], state=JobState.CANCELLED)
    await assert_stats_match_a_full_count(store)

    # Deletes (the delete trigger), as retention makes them.
    gone = [made[JobState.SUCCEEDED][0].id, quarantined[2].id, made[JobState.QUEUED][1].id]
    async with store.transaction() as connection:
        await connection.execute(delete(tables.jobs).where(tables.jobs.c.id.in_(gone)))
    await assert_stats_match_a_full_count(store)


async def test_concurrent_finishes_are_all_counted(store: Store) -> None:
    """Many backends finishing at once each append their deltas; none is lost or doubled."""
    running = await factories.jobs(store, 120, state=JobState.RUNNING)

    async def finish(job_ids: list[uuid.UUID]) -> None:
        await factories.set_job(
            store, job_ids, state=JobState.SUCCEEDED, lease_token=None, lease_until=None
        )

    groups = [[job.id for job in running[i : i + 10]] for i in range(0, 120, 10)]
    await asyncio.gather(*(finish(group) for group in groups))
    stats = await store.stats()
    assert stats.jobs_by_state[JobState.SUCCEEDED.value] == 120
    assert JobState.RUNNING.value not in stats.jobs_by_state
    await assert_stats_match_a_full_count(store)
    # Folding the deltas into the totals changes nothing the stats say.
    assert await RelayStore(store).fold_job_counts() >= 1
    assert await factories.count(store, tables.job_count_deltas) == 0
    await assert_stats_match_a_full_count(store)


async def test_a_group_finished_in_one_statement_writes_one_delta_per_bucket(store: Store) -> None:
    """The counts are written per statement (migration 0017): a group commit of twelve
    outcomes appends one delta per (state, code), each the exact count."""
    executions = PgExecutionStore(store, queue=None)
    jobs = await factories.jobs(store, 12)
    claims = [await executions.claim(job.id, LeaseTerms.fresh(30)) for job in jobs]
    assert all(isinstance(claim, Claimed) for claim in claims)
    outcomes: list[Outcome] = [Succeeded({})] * 8 + [Quarantine("permanent_error", "no")] * 4
    await asyncio.gather(
        *(
            executions.finish(
                claim.job.id,
                lease_token=claim.lease_token,
                attempt=1,
                outcome=outcome,
                related=False,
            )
            for claim, outcome in zip(claims, outcomes, strict=True)
            if isinstance(claim, Claimed)
        )
    )
    deltas = await store.fetch_all(
        text("SELECT state, code, n FROM jobrelay.job_count_deltas ORDER BY 1")
    )
    assert [tuple(row) for row in deltas] == [
        ("quarantined", "permanent_error", 4),
        ("succeeded", "", 8),
    ]
    await assert_stats_match_a_full_count(store)


async def _deltas(store: Store) -> list[tuple[Any, ...]]:
    rows = await store.fetch_all(text("SELECT state, code, n FROM jobrelay.job_count_deltas"))
    return [tuple(row) for row in rows]


async def test_a_finish_adds_to_a_free_total_in_place_and_to_a_held_one_as_a_delta(
    store: Store,
) -> None:
    """A bucket whose total exists and no other transaction holds is added to in place: no
    delta to write and fold (migration 0017). Held, a delta is appended instead of waiting."""
    await factories.jobs(store, 3, state=JobState.SUCCEEDED)
    assert await RelayStore(store).fold_job_counts() == 1  # the total of succeeded exists now
    await factories.jobs(store, 2, state=JobState.SUCCEEDED)
    assert await _deltas(store) == []

    async with store.transaction() as holder:
        await holder.execute(
            text("SELECT n FROM jobrelay.job_totals WHERE state = 'succeeded' FOR UPDATE")
        )
        await factories.jobs(store, 4, state=JobState.SUCCEEDED)  # another transaction
        assert await _deltas(store) == [("succeeded", "", 4)]
    await assert_stats_match_a_full_count(store)
    totals = await store.fetch_all(text("SELECT n FROM jobrelay.job_totals WHERE code = ''"))
    assert [row.n for row in totals] == [5]


async def test_the_dispatchers_maintenance_folds_the_deltas_into_the_totals(store: Store) -> None:
    await factories.jobs(store, 5, state=JobState.SUCCEEDED)
    await factories.jobs(store, 2, state=JobState.QUARANTINED, last_error_code="delivery_limit")
    # One delta per bucket and statement (migration 0017), each its statement's count.
    assert await factories.count(store, tables.job_count_deltas) == 2
    maintainer = store_maintenance(store, interval=0.05)
    maintenance = asyncio.create_task(maintainer.run())
    try:
        await eventually(
            lambda: _count_is(store, tables.job_count_deltas, 0), what="the deltas folded"
        )
    finally:
        maintainer.stop()
        await maintenance
    totals = await store.fetch_all(
        text("SELECT state, code, n FROM jobrelay.job_totals ORDER BY 1")
    )
    assert [tuple(row) for row in totals] == [
        ("quarantined", "delivery_limit", 2),
        ("succeeded", "", 5),
    ]
    await assert_stats_match_a_full_count(store)


async def _count_is(store: Store, table: Any, n: int) -> bool:
    return await factories.count(store, table) == n


async def test_retention_deletes_finished_jobs_past_the_window_with_everything_they_own(
    store: Store,
) -> None:
    old = {
        state: await factories.jobs(store, 4, state=state, with_outbox=True, finished_at=LONG_AGO)
        for state in TERMINAL_STATES
    }
    recent = await factories.jobs(store, 3, state=JobState.SUCCEEDED, with_outbox=True)
    # Live jobs with an old history are never deleted.
    live = await factories.jobs(store, 3, state=JobState.RETRYING, available_at=LONG_AGO)
    everyone = [job.id for jobs in old.values() for job in jobs] + [j.id for j in recent + live]
    async with store.transaction() as connection:
        await factories.job_events(connection, everyone, "received", at=LONG_AGO)
        for job in old[JobState.SUCCEEDED] + recent:
            await factories.job_result(connection, job.id, {"ok": True})

    maintenance = store_maintenance(store, retention_seconds=DAY, retention_batch_size=3)
    assert await maintenance.apply_retention() == (0, 8)  # succeeded and cancelled, batches of 3
    assert await maintenance.apply_retention() == (0, 0)

    kept = {row.id for row in await store.fetch_all(text("SELECT id FROM jobrelay.jobs"))}
    expected = {j.id for j in old[JobState.QUARANTINED] + recent + live}
    assert kept == expected
    for table in (tables.outbox, tables.job_events, tables.job_results):
        owners = await store.fetch_all(text(f"SELECT DISTINCT job_id FROM {table.fullname}"))
        assert {row.job_id for row in owners} <= kept, table.name
    await assert_stats_match_a_full_count(store)

    # Quarantined jobs wait for an operator, unless their own retention is set.
    maintenance = store_maintenance(
        store, retention_seconds=DAY, quarantine_retention_seconds=DAY, retention_batch_size=3
    )
    assert await maintenance.apply_retention() == (0, 4)
    await assert_stats_match_a_full_count(store)


async def test_an_idempotency_key_is_taken_until_retention_deletes_its_job(store: Store) -> None:
    client = await factories.client(store)

    async def submit() -> Any:
        return await store.accept_job(
            client.id,
            JobRequest("order-1", "demo.sleep", {"seconds": 0}, 3),
        )

    first = await submit()
    await factories.set_job(store, [first.job.id], state=JobState.SUCCEEDED, finished_at=LONG_AGO)
    again = await submit()
    assert (again.created, again.job.id) == (False, first.job.id)

    maintenance = store_maintenance(store, retention_seconds=DAY)
    assert await maintenance.apply_retention() == (0, 1)  # its outbox row goes with it
    after = await submit()
    assert after.created and after.job.id != first.job.id


async def test_an_accept_whose_key_lost_its_job_in_between_makes_a_new_job(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention may delete the key's job between the insert that found the key taken and the
    read of that job: the key is free then, and the accept inserts again (not a 500)."""
    client = await factories.client(store)
    request = JobRequest("order-2", "demo.sleep", {"seconds": 0}, 3)
    first = await store.accept_job(client.id, request)
    plain_fetch_all = store.fetch_all

    async def retention_strikes_in_between(statement: Any, **params: Any) -> list[Any]:
        rows = await plain_fetch_all(statement, **params)
        # after the insert that found the key taken: the grouped one, or the single one
        if statement in (q.ACCEPT_JOBS, q.ACCEPT_JOB) and not rows:
            gone = delete(tables.jobs).where(tables.jobs.c.id == first.job.id)
            async with store.transaction() as connection:
                await connection.execute(gone)
        return rows

    monkeypatch.setattr(store, "fetch_all", retention_strikes_in_between)
    again = await store.accept_job(client.id, request)
    assert again.created and again.job.id != first.job.id


async def test_new_jobs_get_time_ordered_ids(store: Store) -> None:
    client = await factories.client(store)
    ids = []
    for number in range(3):
        accepted = await store.accept_job(
            client.id,
            JobRequest(f"k{number}", "demo.sleep", {}, 1),
        )
        ids.append(accepted.job.id)
        await asyncio.sleep(0.002)  # another millisecond
    assert [job_id.version for job_id in ids] == [7, 7, 7]
    assert ids == sorted(ids)


# --- plans ----------------------------------------------------------------------------------

# Every statement the stats page and retention run, with parameters.
OPERATOR_STATEMENTS = {
    "JOBS_BY_STATE": {},
    "OUTBOX_BACKLOG": {},
    "EXPIRED_LEASES": {},
    "RETRYING_SUMMARY": {},
    "QUARANTINED_BY_CODE": {},
    "FAILED_BY_CODE": {},
    "PUBLISHED_NEVER_CLAIMED": {"older_than_seconds": 300},
    "REDISPATCHED_RECENTLY": {},
    "QUARANTINED_COUNT": {},
    "FINISHED_PER_MINUTE": {},
    "DELETE_FINISHED_JOBS": {"state": "succeeded", "retention_seconds": DAY, "limit": 500},
    "DELETE_PUBLISHED_OUTBOX": {"retention_seconds": DAY, "limit": 500},
}


async def test_operator_statements_never_scan_the_finished_jobs(store: Store) -> None:
    """With many finished jobs and few live ones, no statement of the stats or of retention
    reads a whole table: each goes through an index that holds only what it needs."""
    client = await factories.client(store)
    await store.fetch_all(
        text(
            """
            WITH made AS (
                INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type,
                    payload,
                                  state, attempts, max_attempts, finished_at)
                SELECT gen_random_uuid(), :client_id, 'k' || n, 'h', 'demo.sleep', '{}',
                       'succeeded', 1, 3, now() - (n || ' seconds')::interval
                FROM generate_series(1, 20000) AS n
                RETURNING id
            ), outbox_rows AS (
                INSERT INTO jobrelay.outbox (job_id, published_at) SELECT id, now() FROM made
            )
            INSERT INTO jobrelay.job_events (job_id, event, attempt) SELECT id, 'succeeded', 1 FROM
                made
            """
        ),
        client_id=client.id,
    )
    await factories.jobs(store, 5, state=JobState.QUEUED, with_outbox=True)
    await store.fetch_all(text("ANALYZE"))

    async with store.transaction() as connection:
        for name, params in OPERATOR_STATEMENTS.items():
            statement = getattr(q, name)
            explained = await connection.execute(text(f"EXPLAIN {statement.text}"), params)
            plan = "\n".join(row[0] for row in explained)
            for table in ("jobs", "job_events", "outbox"):
                assert f"Seq Scan on {table}" not in plan, f"{name}:\n{plan}"
    await assert_stats_match_a_full_count(store)
