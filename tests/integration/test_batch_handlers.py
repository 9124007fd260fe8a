"""Batch handlers end to end (docs/batch-handlers.md, SPEC §22): the real dispatcher and real
consumers, in the test's event loop, on PostgreSQL and RabbitMQ. One call serves many jobs, and
each job keeps its own result, attempts, retries and quarantine; a batch key never mixes keys;
a consumer stopped while its batch runs loses no job, and another finishes them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay import BatchContext, PermanentError, Registry, TransientError
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support.consumer_kit import new_client, rows, running_consumer, submit
from tests.support.outbox import running_dispatcher
from tests.support.waiting import eventually


class Item(BaseModel):
    n: int
    tenant: str = "a"
    fail: str = ""  # "once": its first attempt fails; "permanent": refused for good


class Calls:
    """Each call's payloads, as (tenant, n) pairs; ``gate``: the handler waits for it."""

    def __init__(self) -> None:
        self.payloads: list[list[tuple[str, int]]] = []
        self.left: list[list[bool]] = []  # after the gate: context.cancelled(i) of each job
        self.gate = asyncio.Event()
        self.gate.set()


def batch_registry(calls: Calls) -> Registry:
    registry = Registry()

    async def answer(
        context: BatchContext, payloads: list[Item]
    ) -> list[dict[str, Any] | Exception]:
        calls.payloads.append([(p.tenant, p.n) for p in payloads])
        await calls.gate.wait()
        calls.left.append([context.cancelled(i) for i in range(len(payloads))])
        answers: list[dict[str, Any] | Exception] = []
        for job, payload in zip(context.jobs, payloads, strict=True):
            if payload.fail == "once" and job.attempt == 1:
                answers.append(TransientError("the API is busy", code="api_busy"))
            elif payload.fail == "permanent":
                answers.append(PermanentError("the API refused it", code="api_refused"))
            else:
                answers.append({"n": payload.n, "attempt": job.attempt})
        return answers

    registry.job("batch.echo", Item, batch_size=100, batch_wait=0.2, max_attempts=3)(answer)
    registry.job("batch.keyed", Item, batch_size=10, batch_wait=0.2, batch_key=lambda p: p.tenant)(
        answer
    )
    return registry


@pytest.fixture
def cfg(make_settings: MakeSettings) -> Settings:
    return make_settings()


async def submit_items(store: Store, job_type: str, items: list[Item]) -> list[uuid.UUID]:
    client_id = await new_client(store)
    return [await submit(store, client_id, job_type, item.model_dump()) for item in items]


async def wait_ended(store: Store, jobs: list[uuid.UUID], within: float = 60) -> None:
    async def ended() -> bool:
        found = await rows(
            store,
            "SELECT count(*) AS n FROM jobrelay.jobs WHERE id = ANY(:ids)"
            " AND state IN ('succeeded', 'quarantined')",
            ids=jobs,
        )
        return int(found[0].n) == len(jobs)

    await eventually(ended, within=within, what=f"{len(jobs)} jobs to end")


async def run_all(
    store: Store, cfg: Settings, job_type: str, items: list[Item], calls: Calls
) -> tuple[list[uuid.UUID], dict[uuid.UUID, Any]]:
    """Submit ``items``, run them to their end on a dispatcher and one consumer: the jobs, in
    the items' order, and what became of each (``outcomes``)."""
    jobs = await submit_items(store, job_type, items)
    async with running_dispatcher(cfg), running_consumer(cfg, batch_registry(calls)):
        await wait_ended(store, jobs)
    return jobs, await outcomes(store, jobs)


async def outcomes(store: Store, jobs: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """Each job's state, attempts, last error code and stored results (result, attempt)."""
    found = await rows(
        store,
        "SELECT j.id, j.state, j.attempts, j.last_error_code,"
        " coalesce(json_agg(json_build_array(r.result, r.attempt))"
        " FILTER (WHERE r.job_id IS NOT NULL), '[]') AS results"
        " FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id"
        " WHERE j.id = ANY(:ids) GROUP BY j.id",
        ids=jobs,
    )
    return {row.id: row for row in found}


async def test_250_jobs_of_a_batch_type_succeed_each_with_its_own_result_in_few_calls(
    store: Store, cfg: Settings
) -> None:
    calls = Calls()
    jobs = await submit_items(store, "batch.echo", [Item(n=n) for n in range(250)])
    async with (
        running_dispatcher(cfg),
        running_consumer(cfg, batch_registry(calls), concurrency=4) as consumer,
    ):
        assert consumer.prefetch == 100  # raised from 4 to the largest batch_size
        await wait_ended(store, jobs)
    ended = await outcomes(store, jobs)
    for n, job_id in enumerate(jobs):
        row = ended[job_id]
        assert (row.state, row.attempts) == ("succeeded", 1)
        assert row.results == [[{"n": n, "attempt": 1}, 1]]
    assert len(calls.payloads) < len(jobs)
    assert max(len(call) for call in calls.payloads) <= 100
    assert sorted(n for call in calls.payloads for _, n in call) == list(range(250))


async def test_an_exception_for_one_job_retries_that_job_alone_which_then_succeeds(
    store: Store, cfg: Settings
) -> None:
    calls = Calls()
    items = [Item(n=n, fail="once" if n == 3 else "") for n in range(10)]
    jobs, ended = await run_all(store, cfg, "batch.echo", items, calls)
    assert ended[jobs[3]].state == "succeeded"
    assert ended[jobs[3]].results == [[{"n": 3, "attempt": 2}, 2]]
    for n in set(range(10)) - {3}:
        assert (ended[jobs[n]].attempts, ended[jobs[n]].results) == (
            1,
            [[{"n": n, "attempt": 1}, 1]],
        )
    retried = await rows(
        store,
        "SELECT job_id, count(*) AS n FROM jobrelay.job_journal WHERE job_id = ANY(:ids)"
        " AND event = 'claimed' GROUP BY job_id HAVING count(*) > 1",
        ids=jobs,
    )
    assert [(row.job_id, row.n) for row in retried] == [(jobs[3], 2)]


async def test_a_permanent_error_for_one_job_quarantines_that_job_alone(
    store: Store, cfg: Settings
) -> None:
    calls = Calls()
    items = [Item(n=n, fail="permanent" if n == 5 else "") for n in range(10)]
    jobs, ended = await run_all(store, cfg, "batch.echo", items, calls)
    refused = ended[jobs[5]]
    assert (refused.state, refused.last_error_code, refused.results) == (
        "quarantined",
        "api_refused",
        [],
    )
    assert [ended[j].state for j in jobs].count("succeeded") == 9


async def test_a_batch_key_never_mixes_its_values_in_one_call(store: Store, cfg: Settings) -> None:
    calls = Calls()
    items = [Item(n=n, tenant="abc"[n % 3]) for n in range(45)]
    jobs, ended = await run_all(store, cfg, "batch.keyed", items, calls)
    assert {row.state for row in ended.values()} == {"succeeded"}
    assert all(len({tenant for tenant, _ in call}) == 1 for call in calls.payloads)
    assert max(len(call) for call in calls.payloads) <= 10
    assert len(calls.payloads) < len(jobs)


async def test_a_consumer_stopped_while_its_batch_runs_loses_nothing(
    store: Store, make_settings: MakeSettings
) -> None:
    cfg = make_settings(shutdown_grace_seconds=0.5)
    calls = Calls()
    calls.gate.clear()  # the first consumer's call never ends
    jobs = await submit_items(store, "batch.echo", [Item(n=n) for n in range(20)])
    async with running_dispatcher(cfg):
        async with running_consumer(cfg, batch_registry(calls)):
            await eventually(lambda: asyncio.sleep(0, calls.payloads), what="a batch's call")
        # Stopped past its grace: each job given back, its lease released, none stored.
        states = await rows(
            store, "SELECT DISTINCT state FROM jobrelay.jobs WHERE id = ANY(:ids)", ids=jobs
        )
        assert {row.state for row in states} <= {"queued", "running"}
        calls.gate.set()
        async with running_consumer(cfg, batch_registry(calls)):
            await wait_ended(store, jobs)
    ended = await outcomes(store, jobs)
    assert {row.state for row in ended.values()} == {"succeeded"}
    for n, job_id in enumerate(jobs):
        [(result, _attempt)] = ended[job_id].results
        assert result["n"] == n


async def test_a_job_cancelled_while_its_batch_runs_ends_cancelled_and_the_others_succeed(
    store: Store, cfg: Settings
) -> None:
    calls = Calls()
    calls.gate.clear()
    jobs = await submit_items(store, "batch.echo", [Item(n=n) for n in range(3)])
    async with running_dispatcher(cfg), running_consumer(cfg, batch_registry(calls)):
        await eventually(lambda: asyncio.sleep(0, calls.payloads), what="a batch's call")
        [(_, n), *_] = calls.payloads[0]
        await store.cancel_job(jobs[n], client_id=None, detail="test: cancel a batch's job")

        async def cancelled() -> bool:
            found = await rows(store, "SELECT state FROM jobrelay.jobs WHERE id = :id", id=jobs[n])
            return found[0].state == "cancelled"

        # The job's own heartbeat carries the cancel (its poll: about a second).
        await eventually(cancelled, what="the batch's job to end cancelled")
        calls.gate.set()
        others = [job for job in jobs if job != jobs[n]]
        await wait_ended(store, others)
    ended = await outcomes(store, jobs)
    assert (ended[jobs[n]].state, ended[jobs[n]].results) == ("cancelled", [])
    assert [ended[job].state for job in others] == ["succeeded", "succeeded"]
    assert calls.left[0][0] is True  # the handler saw it leave
    assert calls.left[0][1:] == [False] * (len(calls.payloads[0]) - 1)
