"""Each job type goes where it can run (SPEC §25, docs/job-types.md "Where a job goes"), against
real PostgreSQL and RabbitMQ: every type has its own queue, a consumer takes the queues of the
types it runs, a type no running consumer runs waits (``no_consumer``) and runs once one starts,
and the shared queue of before still defers what its consumer does not run (a rolling upgrade's
messages).
"""

from __future__ import annotations

import uuid
from typing import Any

import aio_pika
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from jobrelay.core.message import CONTENT_TYPE, Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.topology import DEFAULT_QUEUE
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    broker,
    eventually,
    mark_outbox_published,
    new_client,
    running_consumer,
    submit,
    wait_state,
)
from tests.support.factories import job_row, results_of
from tests.support.outbox import running_dispatcher


class Nothing(BaseModel):
    pass


def registry_of(job_type: str, consumer: str) -> Registry:
    """One type, whose handler says which consumer ran it."""
    registry = Registry()

    @registry.job(job_type, Nothing)
    async def run(context: JobContext, payload: Nothing) -> dict[str, Any]:
        return {"by": consumer}

    return registry


@pytest.fixture
async def client_id(store: Store) -> uuid.UUID:
    return await new_client(store)


@pytest.fixture
def cfg(make_settings: MakeSettings) -> Settings:
    return make_settings()


async def journal_events(store: Store, job_id: uuid.UUID) -> list[str]:
    return [entry.event for entry in await store.job_events(job_id)]


def deliveries(consumer: Any, outcome: str) -> float:
    return float(consumer.metrics.deliveries.labels(outcome)._value.get())


async def test_two_consumers_of_different_types_each_get_only_the_jobs_they_run(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    sent: list[tuple[uuid.UUID, str]] = []
    async with (
        running_dispatcher(cfg),
        running_consumer(cfg, registry_of("routing.x", "A")) as a,
        running_consumer(cfg, registry_of("routing.y", "B")) as b,
    ):
        for n in range(8):  # one at a time: each job is the only one in flight
            job_type = "routing.y" if n % 2 else "routing.x"
            job_id = await submit(store, client_id, job_type, {})
            # A deferral would put the job back for 30-60 s: it would not succeed in time.
            await wait_state(store, job_id, "succeeded")
            sent.append((job_id, job_type))

    for job_id, job_type in sent:
        expected = "A" if job_type == "routing.x" else "B"
        assert await results_of(store, job_id) == [({"by": expected}, 1)]
        journal = await journal_events(store, job_id)
        assert "deferred" not in journal and journal.count("claimed") == 1, journal
    assert deliveries(a, "deferred") == deliveries(b, "deferred") == 0
    assert deliveries(a, "succeeded") == deliveries(b, "succeeded") == 4


async def test_a_type_no_running_consumer_runs_waits_as_no_consumer_and_runs_once_one_starts(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    async with running_consumer(cfg, registry_of("routing.x", "A")):
        # Before any publish: the job view reads no_consumer from who serves the type.
        served = await submit(store, client_id, "routing.x", {})
        waiting = await submit(store, client_id, "routing.z", {})

        async def served_is_seen() -> bool:
            job = await store.get_job(served)
            return job is not None and job.no_consumer is False

        await eventually(served_is_seen, what="routing.x served by the running consumer")
        async with running_dispatcher(cfg):
            await wait_state(store, served, "succeeded")

            async def published() -> bool:
                return "published" in await journal_events(store, waiting)

            await eventually(published, what="the routing.z job published")
            job = await store.get_job(waiting)
            assert job is not None
            assert (job.state, job.attempts, job.no_consumer) == (JobState.QUEUED, 0, True)
            assert (await store.stats()).no_consumer == {"routing.z": 1}
            finished = await store.get_job(served)
            assert finished is not None and finished.no_consumer is False  # not waiting

            async with running_consumer(cfg, registry_of("routing.z", "C")) as c:
                await wait_state(store, waiting, "succeeded")

    assert await results_of(store, waiting) == [({"by": "C"}, 1)]
    journal = await journal_events(store, waiting)
    assert "deferred" not in journal and journal.count("claimed") == 1, journal
    assert deliveries(c, "deferred") == 0
    assert (await store.stats()).no_consumer == {}


async def test_the_shared_queue_of_before_still_runs_what_it_can_and_defers_the_rest(
    cfg: Settings, store: Store, client_id: uuid.UUID
) -> None:
    """Messages published into jobrelay.jobs.default before the upgrade: the consumer runs the
    types it knows and defers the others (no attempt), as before: the rolling-upgrade net."""
    known = await submit(store, client_id, "routing.x", {})
    unknown = await submit(store, client_id, "routing.y", {})
    await mark_outbox_published(store)
    async with running_consumer(cfg, registry_of("routing.x", "A")) as a:
        await publish_to_shared_queue(cfg, [(known, "routing.x"), (unknown, "routing.y")])
        await wait_state(store, known, "succeeded")

        async def deferred() -> bool:
            return "deferred" in await journal_events(store, unknown)

        await eventually(deferred, what="the unknown type deferred")
    row = await job_row(store, unknown)
    assert (row.state, row.attempts, row.last_error_code) == ("queued", 0, "unknown_job_type")
    assert deliveries(a, "deferred") == 1


async def publish_to_shared_queue(settings: Settings, jobs: list[tuple[uuid.UUID, str]]) -> None:
    """Messages straight into the shared default queue, as a dispatcher of before left them."""
    async with broker(settings) as channel:
        for job_id, job_type in jobs:
            await channel.default_exchange.publish(
                aio_pika.Message(
                    Envelope(job_id, job_type).encode(),
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    content_type=CONTENT_TYPE,
                    correlation_id=str(job_id),
                ),
                routing_key=DEFAULT_QUEUE,
            )


async def test_a_database_not_yet_at_revision_0014_is_said_once_and_is_not_fatal_to_the_consumer(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.fetch_all(text("ALTER TABLE jobrelay.job_types DROP COLUMN served_until"))
    types = PgTypeStore(store)

    await types.mark_served(["routing.x"], seconds=30)
    await types.mark_served(["routing.x"], seconds=30)

    said = [r for r in caplog.records if "served_until" in r.getMessage()]
    assert len(said) == 1 and "jobrelay migrate" in said[0].getMessage()
