"""The worker's flow control decisions on the in-memory store
(``tests/support/consumer_fakes.py``): a job of a paused queue, or of a type (or key) at its
limit, is held — acked, put back due later with its attempts untouched, its handler not run —
and claimed once its queue is resumed or a slot or token is free. The store keeps the same
rules as PostgreSQL (tests/integration/test_flow_claim.py,
tests/integration/test_execution_store_contract.py).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay.consumer.verdict import Disposition
from jobrelay.consumer.worker import Worker
from jobrelay.core.deliveries import DeliveryOutcome
from jobrelay.core.execution import HOLD_AT_LIMIT_SECONDS, Claimed, LeaseTerms
from jobrelay.core.flow import Limit, Rate
from jobrelay.core.message import Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.states import JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import Clock, Empty, FakeDelivery, unit_worker


class Keyed(BaseModel):
    key: str = ""


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> InMemoryExecutionStore:
    return InMemoryExecutionStore(clock)


@pytest.fixture
def runs() -> list[uuid.UUID]:
    return []


@pytest.fixture
def registry(runs: list[uuid.UUID]) -> Registry:
    registry = Registry()

    async def run(context: JobContext, payload: Any) -> dict[str, Any]:
        runs.append(context.job_id)
        return {}

    registry.job("t.free", Empty)(run)
    registry.job("t.one_per_key", Keyed, concurrency=1, concurrency_key=lambda p: p.key)(run)
    registry.job("t.two_per_second", Empty, rate="2/s")(run)
    return registry


def make_worker(
    store: InMemoryExecutionStore,
    registry: Registry,
    clock: Clock,
    tmp_path: Path,
    runtime: dict[str, Limit] | None = None,
) -> Worker:
    return unit_worker(store, registry, clock, tmp_path, runtime_limits=lambda: runtime or {})


async def deliver(worker: Worker, job_id: uuid.UUID, job_type: str) -> tuple[FakeDelivery, Any]:
    delivery = FakeDelivery(Envelope(job_id=job_id, type=job_type).encode())
    return delivery, await worker.handle(delivery)


async def test_a_job_of_a_paused_queue_is_held_acked_and_not_run(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path, runs: list
) -> None:
    job = store.add("t.free")
    store.paused_queues.add("default")
    worker = make_worker(store, registry, clock, tmp_path)

    delivery, verdict = await deliver(worker, job.id, "t.free")

    assert (verdict.disposition, verdict.outcome) == (Disposition.ACK, DeliveryOutcome.HELD)
    assert delivery.settled == ["ack"]
    assert runs == []
    held = store.jobs[job.id]
    assert (held.state, held.attempts) == (JobState.QUEUED, 0)
    assert store.events(job.id) == [JobEvent.HELD]
    assert store.outbox == [(job.id, clock.now)]  # due now: it waits for the resume
    assert "queue_paused" in (store.journal[job.id][-1].detail or "")

    store.paused_queues.clear()
    _, verdict = await deliver(worker, job.id, "t.free")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED
    assert runs == [job.id]


async def test_a_pause_of_another_queue_holds_nothing_here(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path
) -> None:
    job = store.add("t.free")
    store.paused_queues.add("slow")
    _, verdict = await deliver(make_worker(store, registry, clock, tmp_path), job.id, "t.free")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED


async def test_a_job_whose_key_is_at_its_code_limit_is_held_for_a_jittered_moment(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path, runs: list
) -> None:
    running = store.add("t.one_per_key", {"key": "a"}, concurrency_key="a")
    waiting = store.add("t.one_per_key", {"key": "a"}, concurrency_key="a")
    other_key = store.add("t.one_per_key", {"key": "b"}, concurrency_key="b")
    worker = make_worker(store, registry, clock, tmp_path)
    rules = worker.claims.rules_for("t.one_per_key")
    assert isinstance(await store.claim(running.id, LeaseTerms.fresh(30), rules=rules), Claimed)

    _, verdict = await deliver(worker, waiting.id, "t.one_per_key")

    assert verdict.outcome is DeliveryOutcome.HELD
    held = store.jobs[waiting.id]
    assert (held.state, held.attempts) == (JobState.QUEUED, 0)
    low, high = HOLD_AT_LIMIT_SECONDS
    delay = (held.available_at - clock.now).total_seconds()
    assert low <= delay <= high
    assert "concurrency limit 1 reached for key 'a'" in (store.journal[waiting.id][-1].detail or "")

    _, verdict = await deliver(worker, other_key.id, "t.one_per_key")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED  # another key has its own slot
    assert runs == [other_key.id]


async def test_a_slot_held_by_an_expired_lease_is_free(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path
) -> None:
    dead = store.add("t.one_per_key", {"key": "a"}, concurrency_key="a")
    waiting = store.add("t.one_per_key", {"key": "a"}, concurrency_key="a")
    worker = make_worker(store, registry, clock, tmp_path)
    rules = worker.claims.rules_for("t.one_per_key")
    assert isinstance(await store.claim(dead.id, LeaseTerms.fresh(5), rules=rules), Claimed)
    clock.now += timedelta(seconds=6)  # its consumer died: the lease ran out
    _, verdict = await deliver(worker, waiting.id, "t.one_per_key")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED


async def test_a_runtime_limit_holds_a_type_the_code_leaves_free(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path
) -> None:
    runtime = {"t.free": Limit(concurrency=1)}
    store.runtime_limits.update(runtime)
    first, second = store.add("t.free"), store.add("t.free")
    worker = make_worker(store, registry, clock, tmp_path, runtime)
    assert worker.claims.rules_for("t.free").limited
    assert isinstance(
        await store.claim(first.id, LeaseTerms.fresh(30), rules=worker.claims.rules_for("t.free")),
        Claimed,
    )
    _, verdict = await deliver(worker, second.id, "t.free")
    assert verdict.outcome is DeliveryOutcome.HELD


async def test_a_type_over_its_rate_is_held_until_the_next_start_is_free(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path
) -> None:
    first, second = store.add("t.two_per_second"), store.add("t.two_per_second")
    worker = make_worker(store, registry, clock, tmp_path)
    _, verdict = await deliver(worker, first.id, "t.two_per_second")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED
    _, verdict = await deliver(worker, second.id, "t.two_per_second")
    assert verdict.outcome is DeliveryOutcome.HELD
    assert store.jobs[second.id].available_at == clock.now + timedelta(seconds=0.5)
    clock.now += timedelta(seconds=0.5)
    _, verdict = await deliver(worker, second.id, "t.two_per_second")
    assert verdict.outcome is DeliveryOutcome.SUCCEEDED


def test_only_a_type_with_a_limit_in_force_is_claimed_alone(
    store: InMemoryExecutionStore, registry: Registry, clock: Clock, tmp_path: Path
) -> None:
    runtime: dict[str, Limit] = {}
    worker = make_worker(store, registry, clock, tmp_path, runtime)
    assert not worker.claims.rules_for("t.free").limited
    assert worker.claims.rules_for("t.one_per_key").limited
    assert worker.claims.rules_for("t.two_per_second").code_limit == Limit(rate=Rate(2, 1))
    runtime["t.free"] = Limit()  # a runtime row, even one that lifts every limit
    assert worker.claims.rules_for("t.free").limited
