"""Declare the broker topology idempotently (names and arguments: ``core/topology.py``). The
dispatcher's publisher (on every connect) and every consumer (at start) do this."""

from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from jobrelay.core import topology as names


async def declare_topology(
    channel: AbstractChannel,
    *,
    delivery_limit: int,
    type_queues: dict[str, str] | None = None,
) -> AbstractExchange:
    """Exchanges, the default work queue, per-type queues and the quarantine. Returns the
    exchange the dispatcher publishes to."""
    quarantine_exchange = await channel.declare_exchange(
        names.QUARANTINE_EXCHANGE, aio_pika.ExchangeType.FANOUT, durable=True
    )
    quarantine = await channel.declare_queue(
        names.QUARANTINE_QUEUE, durable=True, arguments=names.quarantine_queue_arguments()
    )
    await quarantine.bind(quarantine_exchange)

    unrouted = await channel.declare_exchange(
        names.UNROUTED_EXCHANGE, aio_pika.ExchangeType.FANOUT, durable=True
    )
    jobs = await channel.declare_exchange(
        names.JOBS_EXCHANGE,
        aio_pika.ExchangeType.TOPIC,
        durable=True,
        arguments=names.jobs_exchange_arguments(),
    )
    default = await declare_work_queue(channel, names.DEFAULT_QUEUE, delivery_limit)
    await default.bind(unrouted)
    for queue_name, job_types in names.typed_queue_bindings(type_queues or {}).items():
        queue = await declare_work_queue(channel, queue_name, delivery_limit)
        for job_type in job_types:
            await queue.bind(jobs, routing_key=job_type)
    return jobs


async def declare_work_queue(
    channel: AbstractChannel, name: str, delivery_limit: int
) -> AbstractQueue:
    return await channel.declare_queue(
        names.work_queue_name(name),
        durable=True,
        arguments=names.work_queue_arguments(delivery_limit),
    )
