"""How many messages wait in a queue: the one queue-depth helper of the test suite."""

from __future__ import annotations

import aio_pika

from jobrelay.core.topology import DEFAULT_QUEUE


async def queue_depth(amqp_url: str, queue: str = DEFAULT_QUEUE) -> int:
    """Exact depth of a queue (passive declare; the management API's counts lag); -1 while
    the queue does not exist yet (the services declare it when they start)."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return -1
        return int(declared.declaration_result.message_count or 0)


async def depth_is(amqp_url: str, expected: int, queue: str = DEFAULT_QUEUE) -> bool:
    """For ``eventually``: the queue holds exactly ``expected`` messages."""
    return await queue_depth(amqp_url, queue) == expected
