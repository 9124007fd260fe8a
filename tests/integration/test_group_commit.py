"""Group commit on real PostgreSQL: the claims and completions that arrive together share one
statement, and every row of a group is still fenced by its own lease token — one stale row
never fails or completes its neighbours (docs/operating.md, "Group commit")."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from jobrelay.core.execution import LeaseTerms
from jobrelay.core.jobs import Succeeded
from jobrelay.db.execution_store import Claimed, Finish, PgExecutionStore, Refusal, Refused
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    events,
    eventually,
    mark_outbox_published,
    new_client,
    publish_jobs,
    quarantined_messages,
    rows,
    running_consumer,
    scalar,
    submit,
    work_queue_count,
)


async def _jobs(store: Store, n: int) -> list[uuid.UUID]:
    client_id = await new_client(store)
    return [await submit(store, client_id, "test.count", {"n": str(i)}) for i in range(n)]


async def test_claims_made_together_share_one_statement_each_under_its_own_token(
    store: Store,
) -> None:
    jobs = await _jobs(store, 12)
    executions = PgExecutionStore(store)
    tokens = [uuid.uuid4() for _ in jobs]
    claims = await asyncio.gather(
        *(
            executions.claim(job, LeaseTerms(token, 30), detail="consumer t")
            for job, token in zip(jobs, tokens, strict=True)
        )
    )
    assert [(c.job.id, c.lease_token) for c in claims if isinstance(c, Claimed)] == list(
        zip(jobs, tokens, strict=True)
    )
    assert executions._claims.groups == 1
    stored = await rows(
        store, "SELECT id, lease_token, attempts FROM jobrelay.jobs WHERE id = ANY(:ids)", ids=jobs
    )
    assert {(r.id, r.lease_token, r.attempts) for r in stored} == {
        (job, token, 1) for job, token in zip(jobs, tokens, strict=True)
    }
    for job in jobs:
        assert await events(store, job) == [("received", 0), ("claimed", 1)]


async def test_one_stale_row_neither_fails_nor_completes_its_neighbours(store: Store) -> None:
    jobs = await _jobs(store, 6)
    executions = PgExecutionStore(store)
    claims = [await executions.claim(job, LeaseTerms.fresh(30)) for job in jobs]
    assert all(isinstance(c, Claimed) for c in claims)
    tokens = [c.lease_token for c in claims if isinstance(c, Claimed)]
    stale = jobs[2]
    tokens[2] = uuid.uuid4()  # a worker whose lease was taken over reports in the same group
    finishes = await asyncio.gather(
        *(
            executions.finish(job, lease_token=token, attempt=1, outcome=Succeeded({"n": i}))
            for i, (job, token) in enumerate(zip(jobs, tokens, strict=True))
        )
    )
    assert finishes == [Finish.WRITTEN] * 2 + [Finish.STALE] + [Finish.WRITTEN] * 3
    assert executions._finishes.groups == 1
    states = dict(
        (r.id, r.state)
        for r in await rows(
            store, "SELECT id, state FROM jobrelay.jobs WHERE id = ANY(:ids)", ids=jobs
        )
    )
    assert states == {job: ("running" if job == stale else "succeeded") for job in jobs}
    results = await rows(
        store, "SELECT job_id, result FROM jobrelay.job_results WHERE job_id = ANY(:ids)", ids=jobs
    )
    assert sorted((r.job_id, r.result["n"]) for r in results) == sorted(
        (job, i) for i, job in enumerate(jobs) if job != stale
    )
    assert ("stale_completion_rejected", 1) in await events(store, stale)


async def test_a_stale_report_and_the_owners_on_one_job_in_one_group_are_told_apart(
    store: Store,
) -> None:
    (job,) = await _jobs(store, 1)
    executions = PgExecutionStore(store)
    old = await executions.claim(job, LeaseTerms.fresh(0.2))
    assert isinstance(old, Claimed)
    await asyncio.sleep(0.3)  # its holder hangs past its lease: another worker takes the job
    owner = await executions.claim(job, LeaseTerms.fresh(30))
    assert isinstance(owner, Claimed) and owner.job.attempts == 2
    stale, current = await asyncio.gather(
        executions.finish(
            job, lease_token=old.lease_token, attempt=1, outcome=Succeeded({"by": 1})
        ),
        executions.finish(
            job, lease_token=owner.lease_token, attempt=2, outcome=Succeeded({"by": 2})
        ),
    )
    assert executions._finishes.groups == 1
    assert (stale, current) == (Finish.STALE, Finish.WRITTEN)
    results = await rows(
        store, "SELECT result FROM jobrelay.job_results WHERE job_id = :id", id=job
    )
    assert [r.result for r in results] == [{"by": 2}]
    assert ("stale_completion_rejected", 1) in await events(store, job)


async def test_two_deliveries_of_one_job_in_one_group_have_one_owner(store: Store) -> None:
    (job,) = await _jobs(store, 1)
    executions = PgExecutionStore(store)
    claims = await asyncio.gather(*(executions.claim(job, LeaseTerms.fresh(30)) for _ in range(2)))
    assert executions._claims.groups == 1
    assert sorted(type(c).__name__ for c in claims) == ["Claimed", "Refused"]
    refused = next(c for c in claims if isinstance(c, Refused))
    assert refused.reason is Refusal.DUPLICATE
    assert (await events(store, job)).count(("claimed", 1)) == 1


async def test_groups_of_two_consumers_sharing_jobs_do_not_deadlock(store: Store) -> None:
    jobs = await _jobs(store, 40)
    first, second = PgExecutionStore(store), PgExecutionStore(store)
    # Each consumer claims every job, in opposite orders: the rows are locked in id order.
    claims = await asyncio.gather(
        *(s.claim(job, LeaseTerms.fresh(30)) for s in (first,) for job in jobs),
        *(s.claim(job, LeaseTerms.fresh(30)) for s in (second,) for job in reversed(jobs)),
    )
    owners = [c for c in claims if isinstance(c, Claimed)]
    assert sorted(c.job.id for c in owners) == sorted(jobs)


# --- acks in groups, on a real broker ------------------------------------------------------


async def test_a_consumer_acks_in_groups_and_every_message_is_settled_once(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    jobs = [
        (await submit(store, client_id, job_type, {"tag": str(i)}), job_type)
        for i in range(80)
        # Every 10th fails permanently: its nack (to the quarantine) sits between acks.
        for job_type in ["test.unstorable_result" if i % 10 == 3 else "test.count"]
    ]
    await mark_outbox_published(store)
    await publish_jobs(cfg, jobs)
    async with running_consumer(cfg, concurrency=16) as consumer:
        await eventually(
            lambda: scalar(
                store,
                "SELECT count(*) = 80 FROM jobrelay.jobs WHERE state IN ('succeeded', "
                "'quarantined')",
            ),
            what="every job to end",
        )
        await eventually(lambda: _settled(consumer, 72), what="the acks to be sent", within=10)
        (groups,) = [g for _, g in consumer.acks._groups.values()]
        assert groups.frames < groups.acks  # some frames acked several deliveries
    # Nothing was left unacked (it would be back in the queue now that the consumer is gone),
    # and each quarantined job's message went to the quarantine, once.
    assert await work_queue_count(cfg) == 0
    assert len(await quarantined_messages(cfg)) == 8
    assert await scalar(store, "SELECT count(*) FROM jobrelay.job_results") == 72


async def _settled(consumer: Any, acks: int) -> bool:
    return sum(g.acks for _, g in consumer.acks._groups.values()) == acks
