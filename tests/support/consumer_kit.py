"""Helpers for consumer tests: jobs in the database, messages on the broker, a consumer running
in the test's event loop, and a registry of test job types."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.exceptions import ChannelInvalidStateError
from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, text

from jobrelay.broker.topology import declare_topology
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.service import Consumer
from jobrelay.consumer.worker import Worker
from jobrelay.core.errors import TransientError
from jobrelay.core.jobs import JobRequest
from jobrelay.core.message import CONTENT_TYPE, Envelope
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings, parse_type_queues
from jobrelay.core.topology import QUARANTINE_QUEUE, work_queue_name
from jobrelay.db.client_store import ClientStore
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.store import Store
from jobrelay.handlers import builtin
from tests.support import factories
from tests.support.queues import queue_depth
from tests.support.waiting import eventually

# --- a registry of test job types (also loadable: --handlers tests.support.consumer_kit:registry)


class CountPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = ""
    first_attempt_sleeps: float = 0.0  # sleep this long on attempt 1 only


def runs_dir(results_dir: Path) -> Path:
    return results_dir / "runs"


def handler_runs(results_dir: Path, job_id: Any) -> int:
    """How many times the test.count handler ran for this job (across processes)."""
    path = runs_dir(results_dir) / str(job_id)
    return len(path.read_text().splitlines()) if path.exists() else 0


def _build_registry() -> Registry:
    registry = Registry()
    for job_type in builtin.registry:
        registry.register(job_type)

    @registry.job("test.count", CountPayload)
    async def count(context: JobContext, payload: CountPayload) -> dict[str, Any]:
        """Record every run in a file, so a test can count the handler's executions."""
        directory = runs_dir(context.results_dir)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / str(context.job_id), "a") as handle:
            handle.write(f"{context.attempt}\n")
        if context.attempt == 1 and payload.first_attempt_sleeps:
            await asyncio.sleep(payload.first_attempt_sleeps)
        return {"attempt": context.attempt, "tag": payload.tag}

    @registry.job("test.flaky_once", CountPayload, timeout_seconds=0.5)
    async def flaky(context: JobContext, payload: CountPayload) -> dict[str, Any]:
        """Hangs past its timeout on attempt 1, succeeds after."""
        if context.attempt == 1:
            await asyncio.sleep(5)
            raise TransientError("unreachable")
        return {"attempt": context.attempt}

    @registry.job("test.unstorable_result", CountPayload)
    async def unstorable(context: JobContext, payload: CountPayload) -> dict[str, Any]:
        """Returns what jsonb cannot hold: a NUL character and a NaN."""
        return {"text": "a\x00b", "ratio": float("nan")}

    return registry


registry = _build_registry()

# --- jobs ---------------------------------------------------------------------------------


async def new_client(store: Store) -> uuid.UUID:
    client_id = await ClientStore(store).create_client(
        f"c-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, is_admin=False
    )
    assert client_id is not None
    return client_id


async def submit(
    store: Store,
    client_id: uuid.UUID,
    job_type: str,
    payload: dict[str, Any],
    *,
    max_attempts: int = 3,
    key: str | None = None,
) -> uuid.UUID:
    accepted = await store.accept_job(
        client_id,
        JobRequest(key or uuid.uuid4().hex, job_type, payload, max_attempts),
    )
    return accepted.job.id


async def scalar(store: Store, sql: str, **params: Any) -> Any:
    async with store.transaction() as connection:
        return (await connection.execute(text(sql), params)).scalar()


async def rows(store: Store, sql: str, **params: Any) -> list[Any]:
    async with store.transaction() as connection:
        return list((await connection.execute(text(sql), params)).all())


async def events(store: Store, job_id: uuid.UUID) -> list[tuple[str, int]]:
    return [(e.event, e.attempt) for e in await store.job_events(job_id)]


async def mark_outbox_published(store: Store) -> None:
    """For tests that publish by hand: the accept's outbox rows count as relayed."""
    await factories.set_outbox(store, published_at=func.now())


class StandInDelivery:
    """A delivery whose ack/nack are recorded; ``dies_before_settling`` models a crash there."""

    def __init__(
        self,
        job_id: uuid.UUID | None,
        job_type: str = "",
        *,
        body: bytes = b"",
        redelivered: bool = False,
    ) -> None:
        self.body = Envelope(job_id, job_type).encode() if job_id else body
        self.settled: list[str] = []
        self.dies_before_settling = False
        self.redelivered = redelivered

    async def ack(self, multiple: bool = False) -> None:
        if self.dies_before_settling:
            raise ChannelInvalidStateError("the process died before its ack")
        self.settled.append("ack")

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        self.settled.append("requeue" if requeue else "dead_letter")

    async def dead_letter_after_ack(self) -> None:
        self.settled.append("dead_letter_after_ack")


def worker(
    store: Store, settings: Settings, job_registry: Registry | None = None, **options: Any
) -> Worker:
    """A worker of the consumer, for tests that hand it one delivery at a time."""
    return Worker(
        PgExecutionStore(store), job_registry or registry, settings, ConsumerMetrics(), **options
    )


async def wait_state(store: Store, job_id: uuid.UUID, state: str, timeout: float = 20) -> None:
    async def reached() -> bool:
        return (await factories.job_row(store, job_id)).state == state

    await eventually(reached, within=timeout, what=f"job {job_id} to be {state}")


async def wait_states(
    store: Store, jobs: Iterable[uuid.UUID], state: str, within: float = 30
) -> None:
    """Until every job of ``jobs`` is in ``state``."""
    ids = list(jobs)

    async def reached() -> bool:
        found = await scalar(
            store,
            "SELECT count(*) FROM jobrelay.jobs WHERE id = ANY(:ids) AND state = :state",
            ids=ids,
            state=state,
        )
        return int(found) == len(ids)

    await eventually(reached, within=within, what=f"{len(ids)} jobs to be {state}")


# --- broker -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def broker(settings: Settings) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    connection = await aio_pika.connect(settings.amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        await declare_topology(
            channel,
            delivery_limit=settings.delivery_limit,
            type_queues=parse_type_queues(settings.type_queues),
        )
        yield channel
    finally:
        await connection.close()


async def publish(channel: aio_pika.abc.AbstractChannel, job_id: Any, job_type: str) -> None:
    """A job's message straight onto the broker, as the relay would send it (no outbox row)."""
    exchange = await channel.get_exchange("jobrelay.jobs")
    await exchange.publish(
        aio_pika.Message(
            Envelope(job_id, job_type).encode(),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            content_type=CONTENT_TYPE,
            correlation_id=str(job_id),
        ),
        routing_key=job_type,
    )


async def publish_jobs(settings: Settings, jobs: list[tuple[uuid.UUID, str]]) -> None:
    async with broker(settings) as channel:
        for job_id, job_type in jobs:
            await publish(channel, job_id, job_type)


async def publish_raw(settings: Settings, body: bytes, routing_key: str = "garbage") -> None:
    async with broker(settings) as channel:
        exchange = await channel.get_exchange("jobrelay.jobs")
        await exchange.publish(
            aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=routing_key,
        )


async def work_queue_count(settings: Settings, name: str = "default") -> int:
    """Depth of a work queue, declared first (with the whole topology) if it is not yet."""
    async with broker(settings):
        pass
    return await queue_depth(settings.amqp_url, work_queue_name(name))


async def quarantined_messages(settings: Settings) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Every message in the quarantine queue (read and requeued: the queue is left as is)."""
    found = []
    async with broker(settings) as channel:
        queue = await channel.declare_queue(QUARANTINE_QUEUE, passive=True)
        while (message := await queue.get(no_ack=False, fail=False)) is not None:
            found.append(message)
        # Closing the connection returns them all.
    return found


def x_death(message: aio_pika.abc.AbstractIncomingMessage) -> dict[str, Any]:
    deaths = message.headers.get("x-death")
    assert isinstance(deaths, list) and deaths, f"no x-death header in {message.headers!r}"
    first = deaths[0]
    assert isinstance(first, dict)
    return first


# --- a consumer in the test's event loop ----------------------------------------------------


@contextlib.asynccontextmanager
async def running_consumer(
    settings: Settings,
    job_registry: Registry | None = None,
    *,
    queue: str = "default",
    concurrency: int = 4,
) -> AsyncIterator[Consumer]:
    consumer = Consumer(
        settings,
        job_registry or registry,
        queue=queue,
        concurrency=concurrency,
        type_queues=parse_type_queues(settings.type_queues),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    # Consuming has begun once the worker exists and the task has not died.
    await eventually(lambda: _started(consumer, task), within=15, what="the consumer to start")
    try:
        yield consumer
    finally:
        stop.set()
        assert await task == 0


async def _started(consumer: Consumer, task: asyncio.Task[int]) -> bool:
    if task.done():
        task.result()  # raise its error
        raise AssertionError("the consumer stopped by itself")
    return consumer.worker is not None and consumer.consuming
