"""Declare the broker topology idempotently (names and arguments: ``core/topology.py``). The
dispatcher's publisher (on every connect) and every consumer (at start) do this.

With ``group_size`` (``JOBRELAY_QUORUM_GROUP_SIZE``) a quorum queue is created with that many
replicas. The value only matters at creation, yet RabbitMQ refuses to redeclare a queue with
another one, with one where it had none, or with none where it had one: a queue that already
exists with another group size (made before the setting was set, or since it changed, or by a
service that lacks it) is taken as it is, with a warning, instead of failing every start
(docs/cluster.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from jobrelay.core import topology as names

log = logging.getLogger(__name__)

# The broker's answers that refuse a declaration or a consume for good: a queue that exists
# with other arguments, a vhost without permission, a missing entity, an exclusive queue
# elsewhere. Anything else during setup (a connection reset, a channel torn down with its
# connection, a timeout) is the broker going away, and setting up again may succeed.
REFUSALS = (
    aiormq.exceptions.ChannelPreconditionFailed,
    aiormq.exceptions.ChannelAccessRefused,
    aiormq.exceptions.ChannelNotFoundEntity,
    aiormq.exceptions.ChannelLockedResource,
)


def is_refusal(error: BaseException) -> bool:
    """Whether ``error``, raised while declaring or subscribing, is the broker's refusal (a
    fault in the setup, reported and not retried) rather than a lost connection."""
    return isinstance(error, REFUSALS) or not isinstance(
        error, ConnectionError | OSError | TimeoutError | RuntimeError | aiormq.exceptions.AMQPError
    )


async def declare_topology(
    channel: AbstractChannel,
    *,
    delivery_limit: int,
    type_queues: dict[str, str] | None = None,
    group_size: int | None = None,
) -> AbstractExchange:
    """Exchanges, the default work queue, per-type queues and the quarantine. Returns the
    exchange the dispatcher publishes to."""
    quarantine_exchange = await channel.declare_exchange(
        names.QUARANTINE_EXCHANGE, aio_pika.ExchangeType.FANOUT, durable=True
    )
    quarantine = await declare_quorum_queue(
        channel, names.QUARANTINE_QUEUE, names.quarantine_queue_arguments(group_size)
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
    default = await declare_work_queue(channel, names.DEFAULT_QUEUE, delivery_limit, group_size)
    await default.bind(unrouted)
    for queue_name, job_types in names.typed_queue_bindings(type_queues or {}).items():
        queue = await declare_work_queue(channel, queue_name, delivery_limit, group_size)
        for job_type in job_types:
            await queue.bind(jobs, routing_key=job_type)
    return jobs


async def declare_type_queues(
    channel: AbstractChannel,
    job_types: Iterable[str],
    *,
    delivery_limit: int,
    group_size: int | None = None,
) -> dict[str, AbstractQueue]:
    """The queue of each of ``job_types`` (a work queue like the others: quorum, dead-lettered
    to the quarantine, the same delivery limit), bound on ``jobrelay.jobs`` by the type's exact
    name. Idempotent: the dispatcher and every consumer that runs the type declare it. A type
    named with a wildcard of the binding (``names.has_own_queue``) gets none."""
    jobs = await channel.get_exchange(names.JOBS_EXCHANGE, ensure=False)
    queues: dict[str, AbstractQueue] = {}
    for job_type in filter(names.has_own_queue, job_types):
        queue = await declare_quorum_queue(
            channel,
            names.type_queue_name(job_type),
            names.work_queue_arguments(delivery_limit, group_size),
        )
        await queue.bind(jobs, routing_key=job_type)
        queues[job_type] = queue
    return queues


async def declare_work_queue(
    channel: AbstractChannel, name: str, delivery_limit: int, group_size: int | None = None
) -> AbstractQueue:
    return await declare_quorum_queue(
        channel,
        names.work_queue_name(name),
        names.work_queue_arguments(delivery_limit, group_size),
    )


async def declare_quorum_queue(
    channel: AbstractChannel, name: str, arguments: dict[str, Any]
) -> AbstractQueue:
    """Declare a durable queue with ``arguments``; one that exists with another initial group
    size is taken as it is (a passive declare; its other arguments are not compared then)."""
    if not await _group_size_fits(channel, name, arguments):
        log.warning(
            "queue %s exists with another %s than %s: it keeps its replicas (change them with "
            "rabbitmq-queues grow / shrink)",
            name,
            names.GROUP_SIZE_ARGUMENT,
            arguments.get(names.GROUP_SIZE_ARGUMENT, "none"),
            extra={"event": "quorum_group_size_differs", "queue": name},
        )
        return await channel.declare_queue(name, passive=True)
    return await channel.declare_queue(name, durable=True, arguments=arguments)


async def _group_size_fits(channel: AbstractChannel, name: str, arguments: dict[str, Any]) -> bool:
    """Try the declaration on a throwaway channel of the same connection (a refused
    declaration closes its channel): False only when the broker refuses it for the group
    size. Any other refusal is left to the real declaration to report."""
    underlay = await channel.get_underlay_channel()
    probe = await underlay.connection.channel(publisher_confirms=False)
    try:
        await probe.queue_declare(name, durable=True, arguments=arguments)
    except aiormq.exceptions.ChannelPreconditionFailed as error:
        return names.GROUP_SIZE_ARGUMENT not in str(error)
    finally:
        if not probe.is_closed:
            await probe.close()
    return True
