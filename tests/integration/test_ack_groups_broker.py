"""Acks in groups (``broker/acks.py``) against a real RabbitMQ: a multiple ack settles exactly
the run of deliveries that were to be acked. A delivery still running or being nacked in the
middle of the run is never covered, which the broker itself tells after a restart: what it
delivers again is exactly what was not acked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from jobrelay.broker.acks import AckRouter, GroupAcked
from jobrelay.broker.topology import declare_topology, declare_work_queue
from jobrelay.core.topology import DEFAULT_QUEUE, QUARANTINE_QUEUE
from tests.support import faults
from tests.support.queues import queue_depth
from tests.support.waiting import eventually

MESSAGES = 10


@pytest.fixture
async def work_queue(amqp_url: str) -> AsyncIterator[str]:
    """The default work queue (dead-lettering to the quarantine), holding bodies b"1".."10"."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await declare_topology(channel, delivery_limit=5)
        queue = await declare_work_queue(channel, DEFAULT_QUEUE, delivery_limit=5)
        for number in range(1, MESSAGES + 1):
            await channel.default_exchange.publish(
                aio_pika.Message(str(number).encode(), delivery_mode=2), routing_key=queue.name
            )
    finally:
        await connection.close()
    yield queue.name


@contextlib.asynccontextmanager
async def delivered(
    amqp_url: str, queue_name: str
) -> AsyncIterator[tuple[AbstractChannel, list[Any]]]:
    """A consumer's channel holding every message of the queue unacked; closed on the way out,
    as a consumer that died (what it did not settle goes back)."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=MESSAGES)
        yield channel, await take_all(await channel.get_queue(queue_name))
    finally:
        await connection.close()


async def take_all(queue: AbstractQueue) -> list[Any]:
    """Every message of the queue, delivered and unacked (as the consumer's deliveries: the
    port's ``dead_letter_after_ack`` is not needed here)."""
    received: list[Any] = []

    async def on_message(message: AbstractIncomingMessage) -> None:
        received.append(message)

    await queue.consume(on_message, no_ack=False)

    async def all_arrived() -> bool:
        return len(received) == MESSAGES

    await eventually(all_arrived, within=20, what="every message delivered")
    return received


async def bodies_left(amqp_url: str, queue_name: str) -> list[bytes]:
    """What the broker holds in the queue now, each taken and acked."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        queue = await channel.get_queue(queue_name)
        left = []
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            left.append(message.body)
        return left
    finally:
        await connection.close()


async def test_a_grouped_ack_never_covers_a_running_or_nacked_delivery_and_a_restart_redelivers_exactly_the_unacked(  # noqa: E501
    amqp_url: str, work_queue: str
) -> None:
    async with delivered(amqp_url, work_queue) as (channel, received):
        router = AckRouter()
        deliveries = {
            int(m.body): GroupAcked(m, router.groups_for(m), m) for m in received
        }  # registered in the broker's order, as the consumer does on arrival
        groups = router.groups_for(received[0])
        # One turn: 1-3 and 5-7 acked, 4 dead-lettered (nack without requeue) meanwhile; 8-10
        # still running.
        await asyncio.gather(
            *(deliveries[n].ack() for n in (1, 2, 3, 5, 6, 7)),
            deliveries[4].nack(requeue=False),
        )
        assert groups.acks == 6
        assert groups.frames < groups.acks  # the run 1-3 went as one multiple ack
        assert not channel.is_closed  # the broker took every frame (no tag acked twice)
    # 8-10 went back when the channel closed.

    faults.rabbit_restart_app()
    assert sorted(await bodies_left(amqp_url, work_queue)) == [b"10", b"8", b"9"]
    # 4 was not acked by anyone's multiple ack: its nack dead-lettered it to the quarantine.
    assert await queue_depth(amqp_url, QUARANTINE_QUEUE) == 1


async def test_an_ack_above_a_running_delivery_leaves_it_to_be_redelivered(
    amqp_url: str, work_queue: str
) -> None:
    async with delivered(amqp_url, work_queue) as (channel, received):
        router = AckRouter()
        deliveries = [GroupAcked(m, router.groups_for(m), m) for m in received]
        # Everything acked in one turn but the first delivery, still running.
        await asyncio.gather(*(delivery.ack() for delivery in deliveries[1:]))
        assert not channel.is_closed

    faults.rabbit_restart_app()
    assert await bodies_left(amqp_url, work_queue) == [b"1"]
