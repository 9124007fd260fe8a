"""The worker's in-memory durable store (``tests/support/durable_fakes.py``, which the worker's
unit tests run on) held to ``db/durable_store.py::PgDurableStore``: each scenario is written once
against the ``DurableStore`` port (``core/durable.py``) and the execution store's, and runs on
both sides of ``tests/support/execution_sides.py``. PostgreSQL is the truth: when the two
disagree, the fake is wrong.

What it covers: a step recorded under the attempt's lease (and nothing under a lease not the
caller's), the claim that brings it back; a sleep (the job asleep without its lease, its attempt
given back, an outbox row at its wake time, no claim before it); a wait for a signal sent before
it, and one that sleeps until the signal wakes it. Not covered: children (the fake's end of a
child wakes no parent; the worker's end-to-end tests cover them) and timeouts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from jobrelay.core.durable import (
    LEASE_GONE,
    Asleep,
    DurableStore,
    Fence,
    SignalTaken,
    StepKind,
    StepRecord,
    StepStatus,
)
from jobrelay.core.execution import Claimed, LeaseTerms, Refusal, Refused
from jobrelay.core.jobs import RetryLater
from jobrelay.core.states import JobEvent, JobState
from jobrelay.db.durable_store import PgDurableStore
from jobrelay.db.store import Store
from tests.support.durable_fakes import InMemoryDurableStore
from tests.support.execution_sides import MemorySide, PostgresSide, Side
from tests.support.ports import port_mismatches

E = JobEvent


@dataclass
class Durable:
    """A side of the execution store's contract with its durable store beside it."""

    side: Side
    port: DurableStore
    signals: Any  # (job_id, name, value) -> the answer of jobrelay_signal, on that side
    sleeps: Any  # job_id -> (wake_at, waiting_on) as the side keeps them
    steps: Any  # job_id -> the names of its recorded steps

    async def running(self) -> Fence:
        """A running job under a live lease: the fence of its attempt."""
        token = uuid.uuid4()
        job_id = await self.side.add(state=JobState.RUNNING, lease_token=token)
        return Fence(job_id, token, 1)

    async def signal(self, job_id: uuid.UUID, name: str, value: Any) -> str:
        answer: str = await self.signals(job_id, name, value)
        return answer

    async def sleep_of(self, job_id: uuid.UUID) -> tuple[datetime | None, Any]:
        """The job's ``wake_at`` and ``waiting_on`` (read from the row itself on PostgreSQL)."""
        found: tuple[datetime | None, Any] = await self.sleeps(job_id)
        return found


@pytest.fixture
async def postgres_durable(store: Store) -> AsyncIterator[Durable]:
    side = PostgresSide(store)
    durable = PgDurableStore(store)

    async def signal(job_id: uuid.UUID, name: str, value: Any) -> str:
        async with store.transaction() as connection:
            sent = await connection.execute(
                text("SELECT jobrelay.jobrelay_signal(:id, :name, CAST(:value AS jsonb))"),
                {"id": job_id, "name": name, "value": _json(value)},
            )
            return str(sent.scalar())

    async def sleeps(job_id: uuid.UUID) -> tuple[datetime | None, Any]:
        async with store.transaction() as connection:
            found = await connection.execute(
                text("SELECT wake_at, waiting_on FROM jobrelay.jobs WHERE id = :id"),
                {"id": job_id},
            )
            row = found.one()
            return row.wake_at, row.waiting_on

    async def steps(job_id: uuid.UUID) -> list[str]:
        async with store.transaction() as connection:
            found = await connection.execute(
                text("SELECT name FROM jobrelay.job_steps WHERE job_id = :id ORDER BY at"),
                {"id": job_id},
            )
            return [row.name for row in found]

    yield Durable(side, durable, signal, sleeps, steps)
    await durable.close()
    await side.close()


@pytest.fixture(params=["memory", "postgresql"])
def durable(request: pytest.FixtureRequest) -> Durable:
    if request.param == "memory":
        side = MemorySide()
        fake = InMemoryDurableStore(side.store)

        async def signal(job_id: uuid.UUID, name: str, value: Any) -> str:
            return fake.send_signal(job_id, name, value)

        async def sleeps(job_id: uuid.UUID) -> tuple[datetime | None, Any]:
            job = side.store.jobs[job_id]
            return job.wake_at, job.waiting_for

        async def steps(job_id: uuid.UUID) -> list[str]:
            return list(fake.job_steps(job_id))

        return Durable(side, fake, signal, sleeps, steps)
    found: Durable = request.getfixturevalue("postgres_durable")
    return found


def _json(value: Any) -> str:
    return json.dumps(value)


def between(value: datetime | None, before: datetime, after: datetime, seconds: float) -> bool:
    slack = timedelta(milliseconds=1)
    delay = timedelta(seconds=seconds)
    return value is not None and before + delay - slack <= value <= after + delay + slack


@pytest.mark.parametrize("implementation", [InMemoryDurableStore, PgDurableStore])
def test_both_durable_stores_have_every_method_of_the_port_with_its_parameters(
    implementation: type,
) -> None:
    assert port_mismatches(DurableStore, implementation) == []


async def test_a_step_recorded_under_the_lease_comes_back_with_the_next_claim(
    durable: Durable,
) -> None:
    fence = await durable.running()
    recorded = await durable.port.record_step(fence, "charge", {"id": 7})
    assert isinstance(recorded, StepRecord)
    assert (recorded.name, recorded.kind, recorded.attempt, recorded.value) == (
        "charge",
        StepKind.STEP,
        1,
        {"id": 7},
    )
    again = await durable.port.record_step(fence, "charge", {"id": 8})  # a lost answer's retry
    assert isinstance(again, StepRecord) and again.value == {"id": 7}

    port = durable.side.port
    retry = RetryLater(delay_seconds=0.0, error_code="late", error="late")
    await port.finish(fence.job_id, lease_token=fence.lease_token, attempt=1, outcome=retry)
    claim = await port.claim(fence.job_id, LeaseTerms.fresh(30.0))
    assert isinstance(claim, Claimed)
    assert claim.job.steps is not None
    assert [(s.name, s.attempt, s.value) for s in claim.job.steps] == [("charge", 1, {"id": 7})]


async def test_a_step_under_a_lease_not_the_callers_is_not_recorded(durable: Durable) -> None:
    fence = await durable.running()
    other = Fence(fence.job_id, uuid.uuid4(), fence.attempt)
    assert await durable.port.record_step(other, "charge", 1) is LEASE_GONE
    assert await durable.port.sleep(other, "sleep", seconds=60, until=None) is LEASE_GONE
    assert await durable.port.wait_for_signal(other, "signal:go", "go", None) is LEASE_GONE
    assert (await durable.side.job(fence.job_id)).state is JobState.RUNNING
    assert await durable.steps(fence.job_id) == []


async def test_a_sleep_gives_up_the_lease_and_the_attempt_and_is_due_at_its_wake_time(
    durable: Durable,
) -> None:
    fence = await durable.running()
    before = await durable.side.now()
    asleep = await durable.port.sleep(fence, "sleep", seconds=60, until=None)
    after = await durable.side.now()
    assert isinstance(asleep, Asleep) and asleep.waiting_for is None
    assert between(asleep.wake_at, before, after, 60)
    job = await durable.side.job(fence.job_id)
    assert (job.state, job.lease_token, job.lease_until) == (JobState.SLEEPING, None, None)
    assert (job.attempts, job.max_attempts) == (1, 4)
    assert await durable.sleep_of(fence.job_id) == (asleep.wake_at, None)
    assert job.available_at == asleep.wake_at
    assert await durable.side.outbox(fence.job_id) == [asleep.wake_at]
    assert (await durable.side.events(fence.job_id))[-1] is E.SLEEPING
    early = await durable.side.port.claim(fence.job_id, LeaseTerms.fresh(30.0))
    assert isinstance(early, Refused) and early.reason is Refusal.DUPLICATE


async def test_a_signal_sent_before_the_wait_is_taken_by_it_without_a_sleep(
    durable: Durable,
) -> None:
    fence = await durable.running()
    assert await durable.signal(fence.job_id, "go", {"n": 1}) == "sent"
    taken = await durable.port.wait_for_signal(fence, "signal:go", "go", None)
    assert taken == SignalTaken({"n": 1})
    assert (await durable.side.job(fence.job_id)).state is JobState.RUNNING


async def test_a_wait_sleeps_until_its_signal_wakes_the_job_whose_next_attempt_takes_it(
    durable: Durable,
) -> None:
    fence = await durable.running()
    asleep = await durable.port.wait_for_signal(fence, "signal:go", "go", None)
    assert asleep == Asleep(None, {"signal": "go"})
    assert (await durable.side.job(fence.job_id)).state is JobState.SLEEPING
    assert await durable.sleep_of(fence.job_id) == (None, {"signal": "go"})
    assert await durable.side.outbox(fence.job_id) == []  # only its signal wakes it

    before = await durable.side.now()
    assert await durable.signal(fence.job_id, "go", [1, 2]) == "sent"
    after = await durable.side.now()
    woken = await durable.side.job(fence.job_id)
    assert woken.state is JobState.QUEUED
    assert await durable.sleep_of(fence.job_id) == (None, None)
    assert between(woken.available_at, before, after, 0)
    assert (await durable.side.events(fence.job_id))[-3:] == [E.SLEEPING, E.SIGNALLED, E.WOKE]
    [due] = await durable.side.outbox(fence.job_id)
    assert between(due, before, after, 0)

    terms = LeaseTerms.fresh(30.0)
    claim = await durable.side.port.claim(fence.job_id, terms)
    assert isinstance(claim, Claimed)
    assert [(s.name, s.status) for s in claim.job.steps or ()] == [
        ("signal:go", StepStatus.WAITING)
    ]
    second = Fence(fence.job_id, terms.token, claim.job.attempts)
    taken = await durable.port.wait_for_signal(second, "signal:go", "go", None)
    assert taken == SignalTaken([1, 2])
