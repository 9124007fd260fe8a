"""Cancelling a running job (docs/submitting.md, "Cancelling") against real PostgreSQL and
RabbitMQ: through the API with a real dispatcher and consumer, and the store's fences when a
completion races the cancel."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from jobrelay.core.execution import Claimed, Finish, LeaseTerms, Renewal
from jobrelay.core.jobs import CancelAnswer, Cancelled, RetryLater, Succeeded
from jobrelay.core.topology import type_queue_name
from jobrelay.db import tables
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support.consumer_kit import events, new_client, submit
from tests.support.factories import count, job_row, results_of
from tests.support.queues import queue_depth
from tests.support.system import System

SLEEP_30 = {"type": "demo.sleep", "payload": {"seconds": 30}}
SLEEP_600 = {"type": "demo.sleep", "payload": {"seconds": 600}}


async def cancel(system: System, job_id: str, token: str | None = None) -> httpx.Response:
    return await system.api.post(f"/v1/jobs/{job_id}/cancel", headers=auth(token or system.alice))


async def event_names(store: Store, job_id: str | uuid.UUID) -> list[str]:
    return [entry.event for entry in await store.job_events(uuid.UUID(str(job_id)))]


# --- through the API, with the real services -----------------------------------------------------


async def test_a_running_sleep_cancelled_through_the_api_ends_cancelled_between_renewals(
    system: System,
) -> None:
    # A long lease (first renewed 100 s after the claim) and a 600 s sleep: only the heartbeat's
    # poll between renewals can carry the cancel within the wait below (30 s). A logical bound,
    # not a measure of speed: neither a renewal nor the sleep's end comes within it.
    system.configure(lease_seconds=300.0)
    job_id = await system.submit(SLEEP_600)
    with system.running("cancel"):
        await system.wait_for("running", job_id, what="the sleep to be claimed")
        answer = await cancel(system, job_id)
        assert answer.status_code == 202, answer.text
        assert answer.json()["id"] == job_id
        await system.wait_for(
            "cancelled", job_id, within=30, what="the consumer to stop the handler"
        )
    row = await job_row(system.store, job_id)
    assert row.finished_at is not None and row.lease_token is None
    assert row.cancel_requested_at is not None
    assert await results_of(system.store, uuid.UUID(job_id)) == []
    journal = await event_names(system.store, job_id)
    assert journal == [
        "received",
        "published",
        "claimed",
        "cancel_requested",
        "cancelled",
    ]
    # The consumers have stopped: a message they had not acked would be back in the queue.
    assert await queue_depth(system.amqp_url, type_queue_name("demo.sleep")) == 0

    again = await cancel(system, job_id)
    assert again.status_code == 409
    assert again.json()["code"] == "not_cancellable"
    assert (
        again.json()["title"]
        == "Only jobs that have not succeeded or been cancelled can be cancelled"
    )


async def test_a_queued_job_is_cancelled_at_once_with_200(system: System) -> None:
    job_id = await system.submit(SLEEP_30)  # nothing runs: it stays queued
    answer = await cancel(system, job_id)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "cancelled" and answer.json()["finished_at"] is not None
    assert await event_names(system.store, job_id) == ["received", "cancelled"]


async def test_cancelling_a_running_job_again_is_the_same_request(system: System) -> None:
    job_id = await system.submit(SLEEP_30)
    claim = await PgExecutionStore(system.store).claim(uuid.UUID(job_id), LeaseTerms.fresh(30))
    assert isinstance(claim, Claimed)  # a consumer holds it (none runs here to carry it out)

    first, second = await cancel(system, job_id), await cancel(system, job_id)
    assert (first.status_code, second.status_code) == (202, 202)
    assert first.json()["state"] == second.json()["state"] == "running"
    assert (await event_names(system.store, job_id)).count("cancel_requested") == 1
    # Another client's job is not there for it.
    assert (await cancel(system, job_id, system.admin)).status_code == 404


# --- the store: the request travels with the heartbeat; the fences decide one outcome ------------


@pytest.fixture
async def client_id(store: Store) -> uuid.UUID:
    return await new_client(store)


async def claimed_with_cancel_requested(
    store: Store, client_id: uuid.UUID
) -> tuple[uuid.UUID, Claimed]:
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 30})
    claim = await PgExecutionStore(store).claim(job_id, LeaseTerms.fresh(30))
    assert isinstance(claim, Claimed)
    assert await store.cancel_job(job_id, client_id=client_id, detail="test") is (
        CancelAnswer.REQUESTED
    )
    return job_id, claim


async def test_the_renewal_and_the_poll_tell_the_holder_of_the_lease_alone(
    store: Store, client_id: uuid.UUID
) -> None:
    job_id = await submit(store, client_id, "demo.sleep", {"seconds": 30})
    executions = PgExecutionStore(store)
    claim = await executions.claim(job_id, LeaseTerms.fresh(30))
    assert isinstance(claim, Claimed)
    lease, foreign = LeaseTerms(claim.lease_token, 30), LeaseTerms.fresh(30)
    assert await executions.renew(job_id, lease) is Renewal.HELD
    assert not await executions.cancel_requested(job_id, lease)

    assert await store.cancel_job(job_id, client_id=client_id, detail="t") is CancelAnswer.REQUESTED
    polls = await asyncio.gather(
        executions.cancel_requested(job_id, lease), executions.cancel_requested(job_id, foreign)
    )
    assert polls == [True, False]
    assert await executions.renew(job_id, lease) is Renewal.CANCEL_REQUESTED
    assert await executions.renew(job_id, foreign) is Renewal.LOST


@pytest.mark.parametrize("first", ["complete", "cancel"])
async def test_a_completion_and_a_cancel_of_one_attempt_make_exactly_one_outcome(
    store: Store, client_id: uuid.UUID, first: str
) -> None:
    job_id, claim = await claimed_with_cancel_requested(store, client_id)
    executions = PgExecutionStore(store)
    complete, cancelled = Succeeded({"slept": 30}), Cancelled()
    order = (complete, cancelled) if first == "complete" else (cancelled, complete)
    finishes = [
        await executions.finish(job_id, lease_token=claim.lease_token, attempt=1, outcome=outcome)
        for outcome in order
    ]
    assert finishes == [Finish.WRITTEN, Finish.STALE]
    await assert_one_outcome(store, job_id, "succeeded" if first == "complete" else "cancelled")


async def test_a_completion_racing_the_cancel_at_the_same_moment_makes_exactly_one_outcome(
    store: Store, client_id: uuid.UUID
) -> None:
    for _ in range(5):
        job_id, claim = await claimed_with_cancel_requested(store, client_id)
        # Two stores: two statements racing for the row, as two processes would.
        finishes = await asyncio.gather(
            *(
                PgExecutionStore(store).finish(
                    job_id, lease_token=claim.lease_token, attempt=1, outcome=outcome
                )
                for outcome in (Succeeded({"slept": 30}), Cancelled())
            )
        )
        assert sorted(finishes) == sorted([Finish.WRITTEN, Finish.STALE])
        winner = "succeeded" if finishes[0] is Finish.WRITTEN else "cancelled"
        await assert_one_outcome(store, job_id, winner)


async def assert_one_outcome(store: Store, job_id: uuid.UUID, state: str) -> None:
    row = await job_row(store, job_id)
    assert (row.state, row.lease_token) == (state, None) and row.finished_at is not None
    results = await results_of(store, job_id)
    assert results == ([({"slept": 30}, 1)] if state == "succeeded" else [])
    journal = [name for name, _ in await events(store, job_id)]
    assert journal.count("succeeded") + journal.count("cancelled") == 1
    assert journal.count("stale_completion_rejected") == 1


async def test_a_failure_of_a_job_whose_cancel_was_requested_ends_it_cancelled_not_retried(
    store: Store, client_id: uuid.UUID
) -> None:
    job_id, claim = await claimed_with_cancel_requested(store, client_id)
    retry = RetryLater(0.0, "unexpected_error", "RuntimeError: flaky")
    finish = await PgExecutionStore(store).finish(
        job_id, lease_token=claim.lease_token, attempt=1, outcome=retry
    )
    assert finish is Finish.CANCELLED
    row = await job_row(store, job_id)
    assert (row.state, row.last_error_code) == ("cancelled", "unexpected_error")
    assert row.finished_at is not None
    # The accept's outbox row only: no retry was scheduled.
    assert await count(store, tables.outbox, tables.outbox.c.job_id == job_id) == 1
    journal = await store.job_events(job_id)
    assert [e.event for e in journal][-2:] == ["cancel_requested", "cancelled"]
    assert journal[-1].detail == "unexpected_error: not retried, its cancel was requested"
