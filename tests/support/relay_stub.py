"""A minimal stand-in for the dispatcher, for consumer tests: publish due outbox rows (with
publisher confirms) and rescue expired leases. Not the product's relay — just enough of SPEC §5
for retry sequences and crash recovery to play out in a test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
from sqlalchemy import text

from jobrelay.broker.topology import declare_topology
from jobrelay.core.message import CONTENT_TYPE, Envelope
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store

DUE_ROWS = text(
    """
    SELECT o.id, o.job_id, j.type FROM outbox o JOIN jobs j ON j.id = o.job_id
    WHERE o.published_at IS NULL AND o.available_at <= now()
    ORDER BY o.available_at LIMIT 200
    FOR UPDATE OF o SKIP LOCKED
    """
)
MARK = text("UPDATE outbox SET published_at = now() WHERE id = :id")
RESCUE = text(
    """
    WITH rescued AS (
        UPDATE jobs SET state = 'queued', lease_token = NULL, lease_until = NULL,
                        available_at = now(), updated_at = now()
        WHERE state = 'running' AND lease_until < now()
        RETURNING id, attempts
    ), new_outbox AS (
        INSERT INTO outbox (job_id) SELECT id FROM rescued
    )
    INSERT INTO job_events (job_id, event, attempt, detail)
    SELECT id, 'lease_expired', attempts, 'rescued by the test relay' FROM rescued
    """
)


async def publish(channel: aio_pika.abc.AbstractChannel, job_id: Any, job_type: str) -> None:
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


async def pump_once(store: Store, channel: aio_pika.abc.AbstractChannel, *, rescue: bool) -> int:
    if rescue:
        async with store.transaction() as connection:
            await connection.execute(RESCUE)
    async with store.transaction() as connection:
        rows = (await connection.execute(DUE_ROWS)).all()
        for row in rows:
            await publish(channel, row.job_id, row.type)
            await connection.execute(MARK, {"id": row.id})
    return len(rows)


@contextlib.asynccontextmanager
async def relay_stub(
    settings: Settings, store: Store, *, interval: float = 0.05, rescue: bool = True
) -> AsyncIterator[None]:
    connection = await aio_pika.connect_robust(settings.amqp_url)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    await declare_topology(channel, delivery_limit=settings.delivery_limit)
    stopping = asyncio.Event()

    async def loop() -> None:
        while not stopping.is_set():
            with contextlib.suppress(Exception):  # e.g. the database restarting under a test
                await pump_once(store, channel, rescue=rescue)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await stopping.wait()

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stopping.set()
        await task
        await connection.close()
