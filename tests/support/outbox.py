"""Helpers for relay tests: jobs and outbox rows written straight to the database, an in-process
dispatcher, and reading back what reached the broker."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aio_pika
from sqlalchemy import func

from jobrelay.core import topology as names
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from jobrelay.db.tables import outbox
from jobrelay.dispatcher.service import Dispatcher
from tests.support import factories
from tests.support.waiting import eventually  # noqa: F401  (re-exported for the relay tests)


async def insert_jobs(
    store: Store, n: int, *, job_type: str = "demo.sleep", delay: float = 0.0
) -> list[tuple[int, uuid.UUID]]:
    """``n`` queued jobs, one outbox row each, due in ``delay`` seconds: (outbox id, job id)."""
    async with factories.connection(store) as connection:
        due = func.now() + timedelta(seconds=delay)
        made = await factories.jobs(connection, n, job_type=job_type, available_at=due)
        rows = await factories.outbox(connection, made)
    return [(row.id, row.job_id) for row in rows]


async def count_unpublished(store: Store) -> int:
    return await factories.count(store, outbox, outbox.c.published_at.is_(None))


async def count_published(store: Store) -> int:
    return await factories.count(store, outbox, outbox.c.published_at.is_not(None))


@asynccontextmanager
async def running_dispatcher(settings: Settings) -> AsyncIterator[Dispatcher]:
    dispatcher = Dispatcher(settings)
    task = asyncio.create_task(dispatcher.run())
    try:
        yield dispatcher
    finally:
        dispatcher.stop()
        await asyncio.wait_for(task, 30)


@dataclass(frozen=True)
class Received:
    body: bytes
    routing_key: str | None
    exchange: str | None
    delivery_mode: int | None
    content_type: str | None
    message_id: str | None
    correlation_id: str | None

    @property
    def document(self) -> Any:
        return json.loads(self.body)


async def drain(
    amqp_url: str, queue: str = names.DEFAULT_QUEUE, *, idle: float = 1.0
) -> list[Received]:
    """Consume and ack every message of ``queue`` until it stays empty for ``idle`` seconds."""
    received: list[Received] = []
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        declared = await channel.declare_queue(queue, passive=True)
        async with declared.iterator() as messages:
            while True:
                try:
                    message = await asyncio.wait_for(messages.__anext__(), idle)
                except TimeoutError:
                    break
                received.append(
                    Received(
                        body=message.body,
                        routing_key=message.routing_key,
                        exchange=message.exchange,
                        delivery_mode=int(message.delivery_mode) if message.delivery_mode else None,
                        content_type=message.content_type,
                        message_id=message.message_id,
                        correlation_id=message.correlation_id,
                    )
                )
                await message.ack()
    return received
