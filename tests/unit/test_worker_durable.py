"""Durable handlers in the worker (docs/durable-execution.md), driven on the in-memory stores
(``tests/support/consumer_fakes.py``, ``tests/support/durable_fakes.py``): a step recorded once
across attempts, a sleep or a wait that ends the attempt without using it (its message acked,
``slept``), a durable call that finds the lease gone (requeued, nothing recorded), and what a
worker without a durable store says. ``async def`` and plain ``def`` handlers alike."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobrelay.consumer.handler_call import HandlerRun
from jobrelay.consumer.lease import LeaseEnd
from jobrelay.consumer.verdict import Disposition, Verdict
from jobrelay.consumer.worker import Worker
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.durable import StepKind, StepStatus, Suspended
from jobrelay.core.errors import TransientError
from jobrelay.core.jobs import Job
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.durable_fakes import InMemoryDurableStore
from tests.support.waiting import eventually
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker


@dataclass
class Durable:
    """A worker's world: both in-memory stores on one hand-driven clock, the job types of the
    tests, and what their step functions did (``ran``: one entry per run of a step's fn)."""

    execution: InMemoryExecutionStore
    durable: InMemoryDurableStore
    registry: Registry
    clock: Clock
    tmp_path: Path
    ran: list[str] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)  # what the handlers' durable calls returned

    def worker(self, *, with_store: bool = True, **options: Any) -> Worker:
        durable = self.durable if with_store else None
        return unit_worker(
            self.execution, self.registry, self.clock, self.tmp_path, durable=durable, **options
        )

    async def deliver(self, job: Job, worker: Worker | None = None) -> tuple[FakeDelivery, Verdict]:
        delivery = FakeDelivery(Envelope(job_id=job.id, type=job.type).encode())
        return delivery, await (worker or self.worker()).handle(delivery)

    def job(self, job: Job) -> Job:
        return self.execution.jobs[job.id]

    def later(self, seconds: float) -> None:
        self.clock.now += timedelta(seconds=seconds)


@pytest.fixture
def world(tmp_path: Path) -> Durable:
    clock = Clock()
    execution = InMemoryExecutionStore(clock)
    registry = Registry()
    world = Durable(execution, InMemoryDurableStore(execution), registry, clock, tmp_path)

    def charge(what: str) -> dict[str, str]:
        world.ran.append(what)
        return {"charged": what}

    @registry.job("t.steps", Empty)
    async def steps(context: JobContext, payload: Empty) -> dict[str, Any]:
        first = await context.step("charge", charge, "card")
        second = await context.step("ship", charge, "parcel")
        if context.attempt == 1:
            raise TransientError("the mail is late", code="late")
        return {"first": first, "second": second}

    @registry.job("t.plain_steps", Empty)
    def plain_steps(context: JobContext, payload: Empty) -> dict[str, Any]:
        first = context.step("charge", charge, "card")
        if context.attempt == 1:
            raise TransientError("the mail is late", code="late")
        return {"first": first}

    @registry.job("t.sleeps", Empty)
    async def sleeps(context: JobContext, payload: Empty) -> dict[str, Any]:
        await context.step("before", charge, "before")
        await context.sleep(60)
        return {"after": await context.step("after", charge, "after")}

    @registry.job("t.plain_sleeps", Empty)
    def plain_sleeps(context: JobContext, payload: Empty) -> dict[str, Any]:
        try:
            context.sleep(60)
        except Exception:  # a handler's own except does not swallow the suspension
            world.ran.append("swallowed")
        return {"woke": True}

    @registry.job("t.waits", Empty)
    async def waits(context: JobContext, payload: Empty) -> dict[str, Any]:
        value = await context.wait_for_signal("approved", timeout=300)
        world.seen.append(value)
        return {"approved": value}

    @registry.job("t.lease_taken", Empty)
    async def lease_taken(context: JobContext, payload: Empty) -> dict[str, Any]:
        def taken() -> int:
            execution.take_over(context.job_id)  # its lease expired, another worker claimed it
            return 1

        await context.step("taken", taken)
        world.ran.append("after the step")
        return {}

    @registry.job("t.outage", Empty)
    async def outage(context: JobContext, payload: Empty) -> dict[str, Any]:
        def away() -> str:
            execution.reachable = False  # the database goes away as the step is recorded
            asyncio.get_running_loop().call_later(0.005, setattr, execution, "reachable", True)
            world.ran.append("away")
            return "done"

        return {"step": await context.step("away", away)}

    @registry.job("t.long_sleeper", Empty)
    async def long_sleeper(context: JobContext, payload: Empty) -> dict[str, Any]:
        await asyncio.sleep(0.2)  # past the early ack of the test
        await context.sleep(60)
        return {}

    return world


async def test_a_recorded_step_is_not_run_again_by_the_retry_which_gets_its_value(
    world: Durable,
) -> None:
    job = world.execution.add("t.steps")
    delivery, verdict = await world.deliver(job)
    assert (verdict.outcome, delivery.settled) == (DeliveryOutcome.RETRIED, ["ack"])
    assert world.ran == ["card", "parcel"]
    recorded = world.durable.job_steps(job.id)
    assert [(r.name, r.kind, r.attempt, r.value) for r in recorded.values()] == [
        ("charge", StepKind.STEP, 1, {"charged": "card"}),
        ("ship", StepKind.STEP, 1, {"charged": "parcel"}),
    ]

    world.later(3600)  # past the retry's backoff
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.ran == ["card", "parcel"]  # neither ran again
    stored = world.execution.results[job.id]
    assert stored.result == {"first": {"charged": "card"}, "second": {"charged": "parcel"}}


async def test_a_plain_handler_s_step_runs_in_its_thread_and_is_recorded_once(
    world: Durable,
) -> None:
    job = world.execution.add("t.plain_steps")
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.RETRIED
    world.later(3600)
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.ran == ["card"]
    assert world.execution.results[job.id].result == {"first": {"charged": "card"}}


async def test_a_sleep_acks_the_message_and_leaves_the_job_sleeping_without_using_an_attempt(
    world: Durable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobrelay.consumer")
    job = world.execution.add("t.sleeps", max_attempts=3)
    worker = world.worker()
    delivery, verdict = await world.deliver(job, worker)
    assert verdict == Verdict(Disposition.ACK, DeliveryOutcome.SLEPT)
    assert delivery.settled == ["ack"]
    assert worker.metrics.deliveries.labels("slept")._value.get() == 1
    assert worker.metrics.lease_losses._value.get() == 0
    asleep = world.job(job)
    wake_at = world.clock.now + timedelta(seconds=60)
    assert (asleep.state, asleep.wake_at, asleep.available_at) == (
        JobState.SLEEPING,
        wake_at,
        wake_at,
    )
    assert (asleep.lease_token, asleep.lease_until) == (None, None)
    assert (asleep.attempts, asleep.max_attempts) == (1, 4)  # the attempt given back
    assert (job.id, wake_at) in world.execution.outbox
    lines = [r for r in caplog.records if getattr(r, "event", None) == "sleeping"]
    assert [r.getMessage() for r in lines] == [f"sleeping until {wake_at.isoformat()}"]

    world.later(30)  # not yet due: a message now is a duplicate
    _, early = await world.deliver(job)
    assert (early.outcome, world.job(job).state) == (DeliveryOutcome.DUPLICATE, JobState.SLEEPING)

    world.later(30)
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.ran == ["before", "after"]  # the step before the sleep ran once
    assert world.job(job).wake_at is None
    events = world.execution.events(job.id)
    assert events[events.index(JobEvent.SLEEPING) + 1] == JobEvent.DUPLICATE_DELIVERY
    assert events[-2:] == [JobEvent.CLAIMED, JobEvent.SUCCEEDED]


async def test_a_plain_handler_s_sleep_ends_its_thread_past_its_own_except_exception(
    world: Durable,
) -> None:
    job = world.execution.add("t.plain_sleeps")
    delivery, verdict = await world.deliver(job)
    assert (verdict.outcome, delivery.settled) == (DeliveryOutcome.SLEPT, ["ack"])
    assert world.job(job).state is JobState.SLEEPING
    world.later(60)
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.ran == []  # the except never saw the suspension


async def test_a_wait_for_a_signal_sleeps_until_the_signal_wakes_it_and_returns_its_value(
    world: Durable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobrelay.consumer")
    job = world.execution.add("t.waits")
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SLEPT
    asleep = world.job(job)
    assert (asleep.state, asleep.waiting_for) == (JobState.SLEEPING, {"signal": "approved"})
    deadline = world.clock.now + timedelta(seconds=300)
    line = next(r for r in caplog.records if getattr(r, "event", None) == "sleeping")
    assert line.getMessage() == f"waiting for signal 'approved' until {deadline.isoformat()}"

    assert world.durable.send_signal(job.id, "approved", {"by": "ops"}) == "sent"
    assert world.job(job).state is JobState.QUEUED  # woken by the signal, before its deadline
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.seen == [{"by": "ops"}]
    assert world.durable.job_steps(job.id)["signal:approved"].status is StepStatus.DONE


async def test_a_durable_call_that_finds_the_lease_gone_records_nothing_and_requeues(
    world: Durable,
) -> None:
    job = world.execution.add("t.lease_taken")
    delivery, verdict = await world.deliver(job)
    assert (verdict.outcome, delivery.settled) == (DeliveryOutcome.LEASE_LOST, ["requeue"])
    assert world.durable.job_steps(job.id) == {}
    assert world.ran == []  # the handler stopped at the step
    assert world.job(job).state is JobState.RUNNING  # the other worker's now


async def test_a_worker_without_a_durable_store_fails_a_durable_call_with_a_clear_error(
    world: Durable,
) -> None:
    job = world.execution.add("t.steps")
    _, verdict = await world.deliver(job, world.worker(with_store=False))
    assert verdict.outcome == DeliveryOutcome.RETRIED
    assert world.ran == []  # the step's fn was not run
    assert "durable calls need a store" in (world.job(job).last_error or "")


async def test_a_long_job_acked_early_that_then_sleeps_settles_as_acked_once(
    world: Durable,
) -> None:
    job = world.execution.add("t.long_sleeper")
    delivery = FakeDelivery(Envelope(job_id=job.id, type=job.type).encode())
    worker = world.worker(long_job_ack_seconds=0.05)
    handling = asyncio.create_task(worker.handle(delivery))

    async def acked_early() -> bool:
        return delivery.settled == ["ack"]

    await eventually(acked_early, within=5, what="the early ack")
    verdict = await handling
    assert verdict.outcome == DeliveryOutcome.SLEPT
    assert delivery.settled == ["ack"]  # not acked a second time
    assert world.job(job).state is JobState.SLEEPING


async def test_a_sleeper_due_in_a_paused_queue_wakes_into_the_pause(world: Durable) -> None:
    job = world.execution.add("t.sleeps")
    await world.deliver(job)
    world.execution.paused_queues.add("default")
    world.later(60)
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.HELD
    assert world.job(job).state is JobState.QUEUED
    assert world.execution.events(job.id)[-2:] == [JobEvent.WOKE, JobEvent.HELD]
    world.execution.paused_queues.clear()
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED


async def test_a_heartbeat_that_finds_the_lease_given_up_by_the_handler_s_sleep_reports_the_sleep(
    world: Durable,
) -> None:
    """The sleep's statement gave up the lease as the heartbeat renewed it: both end in the same
    turn of the loop; the attempt is the sleep's (acked), not a lost lease (requeued)."""
    worker = world.worker(heartbeat_interval=0.001)
    slept = asyncio.Event()

    async def handler() -> HandlerRun:
        await asyncio.sleep(0.01)  # past the first beat
        slept.set()
        asleep = Suspended(world.clock.now, None)
        return HandlerRun(None, asleep, 0.01, asleep)

    async def heartbeat() -> LeaseEnd:
        await slept.wait()
        return LeaseEnd.TAKEN

    run = await worker.lease.watch(asyncio.create_task(handler()), heartbeat, deadline=1e12)
    assert isinstance(run, HandlerRun) and isinstance(run.interrupt, Suspended)


async def test_a_step_recorded_through_a_short_database_outage_is_retried_not_failed(
    world: Durable,
) -> None:
    job = world.execution.add("t.outage")
    _, verdict = await world.deliver(job)
    assert verdict.outcome == DeliveryOutcome.SUCCEEDED
    assert world.durable.calls >= 2  # refused while away, then recorded
    assert world.ran == ["away"]
    assert world.durable.job_steps(job.id)["away"].value == "done"
