"""How full the work queues are, as the broker says: a passive ``queue.declare`` answers a
queue's ready messages (published, not yet delivered) and its consumers from the queue itself,
in one round trip, without touching a message (docs/flow-control.md).

The dispatcher reads it before each fill of the relay window; ``jobrelay queues list``, the
admin API and the console read the same figures (``queue_depths``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection

from jobrelay.broker.connection import cause_of, connect_broker
from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.relay import QueueDepth
from jobrelay.core.topology import work_queue_name


async def queue_depths(channel: AbstractChannel, queues: Sequence[str]) -> dict[str, QueueDepth]:
    """Ready messages and consumers of each work queue (short names, ``default``). A queue
    the broker does not have is left out; the broker then closes ``channel``, so a caller
    reading several queues should list the ones it declared itself."""
    depths: dict[str, QueueDepth] = {}
    for queue in queues:
        try:
            declared = await channel.declare_queue(work_queue_name(queue), passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return depths
        result = declared.declaration_result
        depths[queue] = QueueDepth(
            ready=int(result.message_count or 0), consumers=int(result.consumer_count or 0)
        )
    return depths


class BrokerDepths:
    """``jobrelay.core.relay.QueueDepths`` on its own broker connection, opened on first use and
    again after a failure (which raises ``BrokerUnavailable``)."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None

    async def depths(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        try:
            channel = await self._open()
            async with asyncio.timeout(self.timeout):
                found = await queue_depths(channel, queues)
        except BrokerUnavailable:
            await self.close()
            raise
        except Exception as error:  # a lost connection, a closed channel, a timeout
            await self.close()
            raise BrokerUnavailable(
                f"broker unreachable for queue depths ({cause_of(error)})"
            ) from None
        if len(found) < len(queues):
            await self._drop_channel()  # the broker closed it on the missing queue
        return found

    async def _open(self) -> AbstractChannel:
        if self._connection is None or self._connection.is_closed:
            self._connection = await connect_broker(
                self.url, seconds=self.timeout, name="jobrelay-dispatcher-window"
            )
            self._channel = None
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._connection.channel(publisher_confirms=False)
        return self._channel

    async def _drop_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()

    async def close(self) -> None:
        await self._drop_channel()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await connection.close()
