"""The worker's decisions, driven end to end on the in-memory store
(``tests/support/consumer_fakes.py``) and a delivery that records how it was settled. No
servers, no sleeping beyond milliseconds."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobrelay.consumer.verdict import Disposition, Verdict
from jobrelay.consumer.worker import Worker
from jobrelay.core.errors import PermanentError
from jobrelay.core.execution import Claimed, Finish, LeaseTerms, Renewal
from jobrelay.core.jobs import Job, Succeeded
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import NOW, Clock, Empty, FakeDelivery, unit_worker


@dataclass
class Setup:
    store: InMemoryExecutionStore
    registry: Registry
    clock: Clock
    tmp_path: Path
    handler_calls: list[int] = field(default_factory=list)

    def worker(self, *, heartbeat_interval: float = 10.0) -> Worker:
        return unit_worker(
            self.store,
            self.registry,
            self.clock,
            self.tmp_path,
            heartbeat_interval=heartbeat_interval,
        )

    async def deliver(self, job: Job) -> tuple[FakeDelivery, Verdict]:
        """The job's message to a new worker: the delivery (what it settled) and the verdict."""
        delivery = delivery_for(job.id, job.type)
        return delivery, await self.worker().handle(delivery)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    clock = Clock()
    store = InMemoryExecutionStore(clock)
    registry = Registry()
    result = Setup(store, registry, clock, tmp_path)

    @registry.job("t.ok", Empty)
    async def ok(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.handler_calls.append(context.attempt)
        return {"attempt": context.attempt}

    @registry.job("t.transient", Empty)
    async def transient(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.handler_calls.append(context.attempt)
        raise RuntimeError("flaky")

    @registry.job("t.permanent", Empty)
    async def permanent(context: JobContext, payload: Empty) -> dict[str, Any]:
        result.handler_calls.append(context.attempt)
        raise PermanentError("bad input", code="bad_input")

    @registry.job("t.taken", Empty)
    async def taken(context: JobContext, payload: Empty) -> dict[str, Any]:
        store.take_over(context.job_id)  # its lease expired and another worker claimed it
        return {"attempt": context.attempt}

    @registry.job("t.lost_lease", Empty)
    async def lost_lease(context: JobContext, payload: Empty) -> dict[str, Any]:
        store.take_over(context.job_id)
        await asyncio.sleep(5)  # the heartbeat notices long before
        return {"attempt": context.attempt}

    @registry.job("t.plain", Empty)
    def plain(context: JobContext, payload: Empty) -> dict[str, Any]:
        return {"thread": True, "attempt": context.attempt}

    return result


def delivery_for(job_id: uuid.UUID, job_type: str) -> FakeDelivery:
    return FakeDelivery(Envelope(job_id=job_id, type=job_type).encode())


async def test_a_successful_attempt_stores_its_result_then_acks(setup: Setup) -> None:
    job = setup.store.add("t.ok")
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "succeeded"
    assert delivery.settled == ["ack"]
    assert setup.store.jobs[job.id].state is JobState.SUCCEEDED
    assert setup.store.results[job.id].result == {"attempt": 1}
    assert setup.store.events(job.id) == [JobEvent.CLAIMED, JobEvent.SUCCEEDED]


async def test_a_refused_claim_is_a_duplicate_delivery_and_is_acked(setup: Setup) -> None:
    job = setup.store.add("t.ok", state=JobState.SUCCEEDED, attempts=1)
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "duplicate"
    assert delivery.settled == ["ack"]
    assert setup.store.events(job.id) == [JobEvent.DUPLICATE_DELIVERY]
    assert setup.handler_calls == []


async def test_a_completion_after_the_lease_was_taken_stores_no_success(setup: Setup) -> None:
    job = setup.store.add("t.taken")
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "stale"
    assert delivery.settled == ["ack"]
    assert job.id not in setup.store.results
    assert setup.store.jobs[job.id].state is JobState.RUNNING  # the other worker's now
    assert setup.store.events(job.id)[-1] is JobEvent.STALE_COMPLETION_REJECTED


async def test_a_transient_error_with_attempts_left_schedules_a_retry_and_acks(
    setup: Setup,
) -> None:
    job = setup.store.add("t.transient", max_attempts=3)
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "retried"
    assert delivery.settled == ["ack"]
    stored = setup.store.jobs[job.id]
    assert stored.state is JobState.RETRYING
    assert stored.last_error_code == "unexpected_error"
    assert stored.lease_token is None
    # Due after the backoff, counted from the injected clock.
    assert NOW < stored.available_at <= NOW + timedelta(seconds=1)
    assert setup.store.outbox == [(job.id, stored.available_at)]
    assert setup.store.events(job.id) == [JobEvent.CLAIMED, JobEvent.RETRY_SCHEDULED]


async def test_a_permanent_error_quarantines_and_dead_letters(setup: Setup) -> None:
    job = setup.store.add("t.permanent")
    delivery, verdict = await setup.deliver(job)
    assert verdict.disposition is Disposition.DEAD_LETTER
    assert delivery.settled == ["dead_letter"]
    stored = setup.store.jobs[job.id]
    assert stored.state is JobState.QUARANTINED
    assert stored.last_error_code == "bad_input"
    assert setup.handler_calls == [1]


async def test_a_transient_error_on_the_last_attempt_quarantines(setup: Setup) -> None:
    job = setup.store.add("t.transient", attempts=2, max_attempts=3)
    delivery = delivery_for(job.id, "t.transient")
    await setup.worker().handle(delivery)
    assert delivery.settled == ["dead_letter"]
    assert setup.store.jobs[job.id].last_error_code == "attempts_exhausted"


async def test_a_job_with_no_attempts_left_is_quarantined_without_running(setup: Setup) -> None:
    job = setup.store.add("t.ok", attempts=3, max_attempts=3)
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "attempts_exhausted"
    assert delivery.settled == ["dead_letter"]
    stored = setup.store.jobs[job.id]
    assert stored.state is JobState.QUARANTINED
    assert stored.last_error_code == "attempts_exhausted"
    assert stored.attempts == 3
    assert setup.handler_calls == []


async def test_a_lease_lost_during_the_heartbeat_reports_no_success(setup: Setup) -> None:
    job = setup.store.add("t.lost_lease")
    delivery = delivery_for(job.id, "t.lost_lease")
    verdict = await asyncio.wait_for(setup.worker(heartbeat_interval=0.01).handle(delivery), 2)
    assert verdict.outcome == "lease_lost"
    assert delivery.settled == ["requeue"]
    assert job.id not in setup.store.results
    assert JobEvent.SUCCEEDED not in setup.store.events(job.id)


class CountingRenewals(InMemoryExecutionStore):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.renewals = 0

    async def renew(self, job_id: uuid.UUID, lease: LeaseTerms) -> Renewal:
        self.renewals += 1
        return await super().renew(job_id, lease)


@pytest.mark.parametrize(("sleeps", "renewed"), [(0.0, False), (0.1, True)])
async def test_a_handler_ending_before_the_first_renewal_is_never_renewed_a_longer_one_is(
    setup: Setup, sleeps: float, renewed: bool
) -> None:
    store = CountingRenewals(setup.clock)
    setup.store = store

    @setup.registry.job("t.sleeps", Empty)
    async def sleeper(context: JobContext, payload: Empty) -> dict[str, Any]:
        await asyncio.sleep(sleeps)
        return {}

    job = store.add("t.sleeps")
    verdict = await setup.worker(heartbeat_interval=0.02).handle(delivery_for(job.id, "t.sleeps"))
    assert verdict.outcome == "succeeded"
    assert (store.renewals > 0) is renewed


async def test_the_database_away_requeues_the_delivery_after_a_pause(setup: Setup) -> None:
    job = setup.store.add("t.ok")
    setup.store.reachable = False
    delivery = delivery_for(job.id, "t.ok")
    verdict = await asyncio.wait_for(setup.worker().handle(delivery), 2)
    assert verdict.outcome == "store_unavailable"
    assert verdict.pause
    assert delivery.settled == ["requeue"]
    assert setup.store.jobs[job.id].state is JobState.QUEUED
    assert setup.handler_calls == []


async def test_an_unknown_type_is_deferred_without_an_attempt(setup: Setup) -> None:
    job = setup.store.add("t.elsewhere")
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "deferred"
    assert delivery.settled == ["ack"]
    stored = setup.store.jobs[job.id]
    assert stored.state is JobState.QUEUED
    assert stored.attempts == 0
    assert stored.available_at > NOW
    assert setup.store.events(job.id) == [JobEvent.DEFERRED]


async def test_an_unknown_type_past_the_patience_is_quarantined(setup: Setup) -> None:
    job = setup.store.add("t.elsewhere")
    await setup.worker().handle(delivery_for(job.id, "t.elsewhere"))
    setup.clock.now = NOW + timedelta(days=1)  # past the delay and the patience (1 hour)
    delivery = delivery_for(job.id, "t.elsewhere")
    await setup.worker().handle(delivery)
    assert delivery.settled == ["dead_letter"]
    assert setup.store.jobs[job.id].state is JobState.QUARANTINED
    assert setup.store.jobs[job.id].attempts == 0


async def test_a_plain_def_handler_runs_in_a_thread_and_succeeds(setup: Setup) -> None:
    job = setup.store.add("t.plain")
    delivery, verdict = await setup.deliver(job)
    assert verdict.outcome == "succeeded"
    assert delivery.settled == ["ack"]
    assert setup.store.results[job.id].result == {"thread": True, "attempt": 1}


async def test_a_stale_worker_cannot_finish_after_a_reclaim(setup: Setup) -> None:
    """The fake follows the core's fences: a re-claim of an expired lease takes the job over."""
    job = setup.store.add("t.ok")
    first = await setup.store.claim(job.id, LeaseTerms.fresh(1))
    setup.clock.now = NOW + timedelta(seconds=2)
    second = await setup.store.claim(job.id, LeaseTerms.fresh(30))
    assert isinstance(first, Claimed)
    assert isinstance(second, Claimed)
    assert second.reclaimed
    assert await setup.store.renew(job.id, LeaseTerms(first.lease_token, 30)) is Renewal.LOST
    finish = await setup.store.finish(
        job.id, lease_token=first.lease_token, attempt=1, outcome=Succeeded({})
    )
    assert finish is Finish.STALE
    assert setup.store.events(job.id) == [
        JobEvent.CLAIMED,
        JobEvent.LEASE_EXPIRED,
        JobEvent.CLAIMED,
        JobEvent.STALE_COMPLETION_REJECTED,
    ]
