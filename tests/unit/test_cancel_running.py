"""Cancelling a running job (docs/submitting.md, "Cancelling"), driven on the in-memory store
(``tests/support/consumer_fakes.py``): the heartbeat carries the request to the handler, the
job ends `cancelled` by the fenced ``cancel_running`` transition, and a completion racing the
cancel makes exactly one outcome."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobrelay.consumer.verdict import Verdict
from jobrelay.consumer.worker import Worker
from jobrelay.core.execution import Claimed, Finish, LeaseTerms, Renewal
from jobrelay.core.jobs import Cancelled, Job, Succeeded
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import NOW, Clock, Empty, FakeDelivery, unit_worker


class CountingStore(InMemoryExecutionStore):
    """Counts the heartbeat's calls: renewals and cancel polls."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.renewals = 0
        self.polls = 0

    async def renew(self, job_id: uuid.UUID, lease: LeaseTerms) -> Renewal:
        self.renewals += 1
        return await super().renew(job_id, lease)

    async def cancel_requested(self, job_id: uuid.UUID, lease: LeaseTerms) -> bool:
        self.polls += 1
        return await super().cancel_requested(job_id, lease)


@dataclass
class Setup:
    store: CountingStore
    registry: Registry
    clock: Clock
    tmp_path: Path
    started: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: list[str] = field(default_factory=list)  # how each handler ended
    release_thread: threading.Event = field(default_factory=threading.Event)
    calls: list[int] = field(default_factory=list)

    def worker(self, *, heartbeat_interval: float = 10.0, poll: float = 0.02) -> Worker:
        return unit_worker(
            self.store,
            self.registry,
            self.clock,
            self.tmp_path,
            heartbeat_interval=heartbeat_interval,
            cancel_poll_interval=poll,
        )


@pytest.fixture
async def setup(tmp_path: Path) -> Setup:
    clock = Clock()
    result = Setup(CountingStore(clock), Registry(), clock, tmp_path)
    loop = asyncio.get_running_loop()

    @result.registry.job("t.long", Empty)
    async def long(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.calls.append(context.attempt)
        result.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            result.stopped.append("cancelled at its await")
            raise
        return {"slept": 30}

    @result.registry.job("t.plain_long", Empty)
    def plain_long(context: JobContext, payload: Empty) -> dict[str, Any]:
        loop.call_soon_threadsafe(result.started.set)
        result.release_thread.wait(10)
        result.stopped.append("thread ran to its end")
        return {"thread": "done"}

    @result.registry.job("t.cancel_then_fail", Empty)
    async def cancel_then_fail(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.store.request_cancel(context.job_id)  # asked while it ran, unseen so far
        raise RuntimeError("flaky")

    @result.registry.job("t.ok", Empty)
    async def ok(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.calls.append(context.attempt)
        return {"ok": True}

    return result


def delivery_for(job: Job) -> FakeDelivery:
    return FakeDelivery(Envelope(job_id=job.id, type=job.type).encode())


async def cancel_while_running(
    setup: Setup, worker: Worker, job: Job
) -> tuple[FakeDelivery, Verdict]:
    delivery = delivery_for(job)
    handling = asyncio.create_task(worker.handle(delivery))
    await asyncio.wait_for(setup.started.wait(), 30)
    assert setup.store.request_cancel(job.id)
    # The handler would sleep 30 s: a verdict within half of that is the cancel's.
    verdict = await asyncio.wait_for(handling, 15)
    return delivery, verdict


def assert_cancelled_without_result(setup: Setup, job: Job, delivery: FakeDelivery) -> None:
    stored = setup.store.jobs[job.id]
    assert stored.state is JobState.CANCELLED
    assert stored.finished_at is not None and stored.lease_token is None
    assert job.id not in setup.store.results
    assert delivery.settled == ["ack"]
    assert setup.store.events(job.id) == [
        JobEvent.CLAIMED,
        JobEvent.CANCEL_REQUESTED,
        JobEvent.CANCELLED,
    ]


async def test_an_async_handler_is_cancelled_at_its_next_await_and_the_job_ends_cancelled(
    setup: Setup,
) -> None:
    job = setup.store.add("t.long")
    worker = setup.worker()
    delivery, verdict = await cancel_while_running(setup, worker, job)
    assert verdict.outcome == "cancelled"
    assert setup.stopped == ["cancelled at its await"]
    assert_cancelled_without_result(setup, job, delivery)
    assert worker.metrics.deliveries.labels("cancelled")._value.get() == 1
    # A long lease (30 s, renewed every 10 s): the poll between renewals saw the request.
    assert setup.store.polls >= 1 and setup.store.renewals == 0


async def test_the_renewal_itself_carries_the_request(setup: Setup) -> None:
    job = setup.store.add("t.long")
    # Renewals every 20 ms, polls (nearly) never: the renewal's answer must stop the handler.
    delivery, verdict = await cancel_while_running(
        setup, setup.worker(heartbeat_interval=0.02, poll=60), job
    )
    assert verdict.outcome == "cancelled"
    assert_cancelled_without_result(setup, job, delivery)
    assert setup.store.renewals >= 1 and setup.store.polls == 0


async def test_a_plain_handler_runs_on_in_its_thread_and_its_result_is_discarded(
    setup: Setup,
) -> None:
    job = setup.store.add("t.plain_long")
    delivery, verdict = await cancel_while_running(setup, setup.worker(), job)
    assert verdict.outcome == "cancelled"
    assert setup.stopped == []  # the thread cannot be interrupted: it still runs
    setup.release_thread.set()
    for _ in range(200):
        if setup.stopped:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # its result, were it ever delivered, would have landed by now
    assert setup.stopped == ["thread ran to its end"]
    assert_cancelled_without_result(setup, job, delivery)


async def test_a_failure_of_a_job_whose_cancel_was_requested_is_not_retried(
    setup: Setup,
) -> None:
    job = setup.store.add("t.cancel_then_fail", max_attempts=3)
    delivery = delivery_for(job)
    verdict = await setup.worker().handle(delivery)
    assert verdict.outcome == "cancelled"
    assert delivery.settled == ["ack"]
    stored = setup.store.jobs[job.id]
    assert (stored.state, stored.last_error_code) == (JobState.CANCELLED, "unexpected_error")
    assert setup.store.outbox == []  # no retry row
    assert setup.store.events(job.id)[-1] is JobEvent.CANCELLED


async def test_a_job_claimed_with_a_cancel_requested_earlier_is_not_run_again(
    setup: Setup,
) -> None:
    job = setup.store.add("t.ok")
    first = await setup.store.claim(job.id, LeaseTerms.fresh(1))
    assert isinstance(first, Claimed)
    assert setup.store.request_cancel(job.id)
    setup.clock.now = NOW + timedelta(seconds=2)  # its consumer died: the lease expired
    delivery = delivery_for(job)
    verdict = await setup.worker().handle(delivery)
    assert verdict.outcome == "cancelled" and delivery.settled == ["ack"]
    assert setup.calls == []
    stored = setup.store.jobs[job.id]
    assert (stored.state, stored.attempts) == (JobState.CANCELLED, 2)


async def test_a_cancel_asked_twice_is_requested_once(setup: Setup) -> None:
    job = setup.store.add("t.ok")
    assert not setup.store.request_cancel(job.id)  # queued: the API cancels it at once instead
    await setup.store.claim(job.id, LeaseTerms.fresh(30))
    assert setup.store.request_cancel(job.id) and setup.store.request_cancel(job.id)
    assert setup.store.events(job.id).count(JobEvent.CANCEL_REQUESTED) == 1


@pytest.mark.parametrize("first", ["complete", "cancel"])
async def test_a_completion_racing_the_cancel_makes_exactly_one_outcome(
    setup: Setup, first: str
) -> None:
    store = setup.store
    job = store.add("t.ok")
    claim = await store.claim(job.id, LeaseTerms.fresh(30))
    assert isinstance(claim, Claimed)
    store.request_cancel(job.id)
    complete, cancel = Succeeded({"done": True}), Cancelled()
    order = (complete, cancel) if first == "complete" else (cancel, complete)
    finishes = [
        await store.finish(job.id, lease_token=claim.lease_token, attempt=1, outcome=outcome)
        for outcome in order
    ]
    assert finishes[0] is Finish.WRITTEN
    assert finishes[1] is Finish.STALE  # the token no longer matches: nothing written
    stored = store.jobs[job.id]
    if first == "complete":  # the cancel request is moot
        assert stored.state is JobState.SUCCEEDED
        assert store.results[job.id].result == {"done": True}
    else:
        assert stored.state is JobState.CANCELLED
        assert job.id not in store.results
    ends = [JobEvent.SUCCEEDED, JobEvent.CANCELLED]
    assert sum(store.events(job.id).count(event) for event in ends) == 1


async def test_a_stale_worker_can_neither_cancel_nor_see_the_cancel_of_a_reclaimed_job(
    setup: Setup,
) -> None:
    store = setup.store
    job = store.add("t.ok")
    old = await store.claim(job.id, LeaseTerms.fresh(1))
    setup.clock.now = NOW + timedelta(seconds=2)
    new = await store.claim(job.id, LeaseTerms.fresh(30))
    assert isinstance(old, Claimed) and isinstance(new, Claimed) and new.reclaimed
    store.request_cancel(job.id)
    assert not await store.cancel_requested(job.id, LeaseTerms(old.lease_token, 30))
    assert await store.cancel_requested(job.id, LeaseTerms(new.lease_token, 30))
    stale = await store.finish(job.id, lease_token=old.lease_token, attempt=1, outcome=Cancelled())
    assert stale is Finish.STALE
    assert store.jobs[job.id].state is JobState.RUNNING
    assert await store.renew(job.id, LeaseTerms(new.lease_token, 30)) is Renewal.CANCEL_REQUESTED
