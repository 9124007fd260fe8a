"""Long jobs (docs/long-jobs.md): a job still running after ``long_job_ack_seconds`` has its
message acked early, and from then on its lease alone holds it; what the end of its attempt
does with a delivery already settled, for each disposition."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from jobrelay.consumer.verdict import Verdict
from jobrelay.consumer.worker import Worker
from jobrelay.core.errors import PermanentError
from jobrelay.core.jobs import Job
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import RESCUE, JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.waiting import eventually
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker

EARLY = 0.05  # long_job_ack_seconds of these tests


class LongJob:
    """A job type whose handler runs until the test lets it end (``finish``), then succeeds
    or fails permanently (``fails``)."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.release = asyncio.Event()
        self.fails = False

        @self.registry.job("t.long", Empty)
        async def long(context: JobContext, payload: Empty) -> dict[str, str]:
            await self.release.wait()
            if self.fails:
                raise PermanentError("it cannot be done", code="impossible")
            return {"done": "yes"}


@dataclass
class Running:
    """A ``t.long`` job being handled by a worker whose early ack is due after ``EARLY``."""

    store: InMemoryExecutionStore
    worker: Worker
    kind: LongJob
    job: Job
    delivery: FakeDelivery
    handling: asyncio.Task[Verdict]

    async def acked_early(self) -> Running:
        async def acked() -> bool:
            return self.delivery.settled == ["ack"]

        await eventually(acked, within=5, what="the early ack")
        return self

    async def end(self) -> Verdict:
        """The handler ends (it fails if ``kind.fails``); the delivery's verdict."""
        self.kind.release.set()
        return await self.handling


def start(tmp_path: Path, *, ack_after: float = EARLY, copy_failures: int = 0) -> Running:
    clock = Clock()
    store = InMemoryExecutionStore(clock)
    kind = LongJob()
    worker = unit_worker(store, kind.registry, clock, tmp_path, long_job_ack_seconds=ack_after)
    job = store.add("t.long")
    delivery = FakeDelivery(Envelope(job_id=job.id, type=job.type).encode())
    delivery.copy_failures = copy_failures
    return Running(store, worker, kind, job, delivery, asyncio.create_task(worker.handle(delivery)))


async def test_a_job_running_past_the_threshold_is_acked_early_and_not_again(
    tmp_path: Path,
) -> None:
    run = await start(tmp_path).acked_early()
    assert run.store.jobs[run.job.id].state is JobState.RUNNING  # acked while it still runs
    verdict = await run.end()
    assert (verdict.outcome, run.delivery.settled) == ("succeeded", ["ack"])
    assert run.store.jobs[run.job.id].state is JobState.SUCCEEDED
    assert run.worker.metrics.long_job_acks._value.get() == 1


async def test_a_job_that_ends_before_the_threshold_is_acked_once_after_its_outcome(
    tmp_path: Path,
) -> None:
    run = start(tmp_path)
    verdict = await run.end()
    await asyncio.sleep(2 * EARLY)  # no ack is left armed
    assert (verdict.outcome, run.delivery.settled) == ("succeeded", ["ack"])
    assert run.worker.metrics.long_job_acks._value.get() == 0


async def test_threshold_zero_never_acks_early(tmp_path: Path) -> None:
    run = start(tmp_path, ack_after=0.0)
    await asyncio.sleep(4 * EARLY)
    assert run.delivery.settled == []
    assert (await run.end()).outcome == "succeeded"
    assert run.delivery.settled == ["ack"]


async def test_a_long_job_quarantined_after_its_early_ack_still_reaches_the_quarantine(
    tmp_path: Path,
) -> None:
    run = await start(tmp_path).acked_early()
    run.kind.fails = True
    verdict = await run.end()
    # Acked already: no nack, a copy of the message published to the quarantine instead.
    assert verdict.outcome == "quarantined"
    assert run.delivery.settled == ["ack", "dead_letter_after_ack"]
    assert run.store.jobs[run.job.id].state is JobState.QUARANTINED


async def test_the_quarantine_copy_is_tried_again_while_the_broker_is_away(
    tmp_path: Path,
) -> None:
    run = await start(tmp_path, copy_failures=2).acked_early()
    run.kind.fails = True
    await run.end()
    assert run.delivery.settled == ["ack", "dead_letter_after_ack"]


async def test_a_long_job_whose_outcome_cannot_be_stored_comes_back_through_its_lease(
    tmp_path: Path,
) -> None:
    run = await start(tmp_path).acked_early()
    run.store.reachable = False  # the database goes away before the outcome is stored
    verdict = await run.end()
    assert verdict.outcome == "store_unavailable"
    assert run.delivery.settled == ["ack"]  # no message to requeue: nothing more is sent
    running = run.store.jobs[run.job.id]
    # Still running under the lease nobody renews: once it expires, the dispatcher's rescue
    # takes the job (with a new outbox row), as it does for a consumer that crashed.
    assert running.state is JobState.RUNNING and running.lease_token is not None
    assert run.store.outbox == []
    assert RESCUE.allows(running.state, lease_expired=True)


async def test_a_long_job_stopped_at_shutdown_is_left_to_its_lease_not_released(
    tmp_path: Path,
) -> None:
    run = await start(tmp_path).acked_early()
    run.handling.cancel()  # the grace period is over
    await asyncio.gather(run.handling, return_exceptions=True)
    assert run.delivery.settled == ["ack"]
    # Released, it would be `queued` with no message and no outbox row: it keeps its lease,
    # which expires into the dispatcher's rescue.
    assert run.store.jobs[run.job.id].state is JobState.RUNNING
    assert JobEvent.LEASE_EXPIRED not in run.store.events(run.job.id)


async def test_a_short_job_stopped_at_shutdown_is_still_released_and_requeued(
    tmp_path: Path,
) -> None:
    run = start(tmp_path, ack_after=60.0)

    async def running() -> bool:
        return run.store.jobs[run.job.id].state is JobState.RUNNING

    await eventually(running, within=5, what="the claim")
    run.handling.cancel()
    await asyncio.gather(run.handling, return_exceptions=True)
    assert run.delivery.settled == ["requeue"]
    assert run.store.jobs[run.job.id].state is JobState.QUEUED
