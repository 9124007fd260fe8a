"""Issue 24 on the in-memory store: a job of a type the consumer does not know is never claimed,
whatever type its message names (item 4); a deferral warns once per type (item 14); a success
clears an earlier attempt's error (item 12)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from jobrelay.consumer.worker import Worker
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> InMemoryExecutionStore:
    return InMemoryExecutionStore(clock)


@pytest.fixture
def runs() -> list[str]:
    return []


@pytest.fixture
def worker(store: InMemoryExecutionStore, clock: Clock, tmp_path: Path, runs: list[str]) -> Worker:
    registry = Registry()

    @registry.job("t.known", Empty)
    async def known(context: JobContext, payload: Empty) -> dict[str, Any]:
        runs.append(context.job_type)
        return {"attempt": context.attempt}

    @registry.job("t.fails_once", Empty)
    async def fails_once(context: JobContext, payload: Empty) -> dict[str, Any]:
        if context.attempt == 1:
            raise RuntimeError("flaky")
        return {"attempt": context.attempt}

    return unit_worker(store, registry, clock, tmp_path)


async def deliver(worker: Worker, job_id: uuid.UUID, message_type: str) -> tuple[str, list[str]]:
    delivery = FakeDelivery(Envelope(job_id=job_id, type=message_type).encode())
    verdict = await worker.handle(delivery)
    return verdict.outcome, delivery.settled


async def test_a_message_naming_another_unknown_type_defers_a_job_of_an_unknown_type_unclaimed(
    worker: Worker, store: InMemoryExecutionStore
) -> None:
    """Item 4: the job was claimed and quarantined with an attempt used (OTHER_TYPE branch)."""
    job = store.add("t.elsewhere")
    assert await deliver(worker, job.id, "t.also_unknown") == ("deferred", ["ack"])
    stored = store.jobs[job.id]
    assert (stored.state, stored.attempts) == (JobState.QUEUED, 0)
    assert stored.last_error_code == "unknown_job_type"
    assert store.events(job.id) == [JobEvent.DEFERRED]


async def test_a_message_naming_a_known_type_defers_a_job_of_an_unknown_type_unclaimed(
    worker: Worker, store: InMemoryExecutionStore, runs: list[str]
) -> None:
    """Item 4, the other half: the message names a type this consumer runs, the job's own
    type is unknown here; the job was claimed (an attempt used) and quarantined."""
    job = store.add("t.elsewhere")
    assert await deliver(worker, job.id, "t.known") == ("deferred", ["ack"])
    stored = store.jobs[job.id]
    assert (stored.state, stored.attempts) == (JobState.QUEUED, 0)
    assert stored.last_error_code == "unknown_job_type"
    assert store.events(job.id) == [JobEvent.DEFERRED]
    assert runs == []


async def test_a_message_naming_another_type_runs_a_job_whose_own_type_is_known(
    worker: Worker, store: InMemoryExecutionStore, runs: list[str]
) -> None:
    job = store.add("t.known")
    assert await deliver(worker, job.id, "t.unknown") == ("succeeded", ["ack"])
    assert runs == ["t.known"]
    assert store.jobs[job.id].state is JobState.SUCCEEDED


async def test_a_deferral_warns_once_per_type_then_logs_at_debug(
    worker: Worker, store: InMemoryExecutionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 14: every deferral was logged at info."""
    caplog.set_level(logging.DEBUG, logger="jobrelay.consumer")
    for job_type in ("t.first", "t.first", "t.second", "t.first"):
        job = store.add(job_type)
        assert await deliver(worker, job.id, job_type) == ("deferred", ["ack"])
    deferrals = [
        (record.levelno, record.type)  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "event", None) == "deferred"
    ]
    assert deferrals == [
        (logging.WARNING, "t.first"),
        (logging.DEBUG, "t.first"),
        (logging.WARNING, "t.second"),
        (logging.DEBUG, "t.first"),
    ]


async def test_a_success_after_a_transient_failure_clears_the_last_error(
    worker: Worker, store: InMemoryExecutionStore, clock: Clock
) -> None:
    """Item 12 (the fake follows FINISH_JOBS): the earlier attempt's error stays in the
    journal only."""
    job = store.add("t.fails_once")
    assert await deliver(worker, job.id, job.type) == ("retried", ["ack"])
    assert store.jobs[job.id].last_error_code == "unexpected_error"
    clock.now = store.jobs[job.id].available_at
    assert await deliver(worker, job.id, job.type) == ("succeeded", ["ack"])
    stored = store.jobs[job.id]
    assert (stored.state, stored.last_error_code, stored.last_error) == (
        JobState.SUCCEEDED,
        None,
        None,
    )
    assert JobEvent.RETRY_SCHEDULED in store.events(job.id)
