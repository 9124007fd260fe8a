"""Deliveries as aiormq hands them over, without aio-pika's message object per delivery.

aio-pika's ``Queue.consume`` builds an ``IncomingMessage`` for every delivery (every property
decoded, whether read or not) and runs the callback in one more task. The consumer reads the
body, the redelivered flag and two headers, and settles by delivery tag: ``RawDelivery`` is
that much, over aiormq's ``DeliveredMessage``, and settles through the channel it came on.

A ``Subscription`` consumes one queue at aiormq's level and takes it again on every channel
the robust channel reopens (a reconnect): aio-pika restores only its own queues' consumers. It
takes it again in a task of its own, never inside aio-pika's reopen: aio-pika awaits its reopen
callbacks inside its reconnect loop, so a ``basic.consume`` that never answers (a quorum queue
without a majority, during a partition) would hold that loop, and the connection would never
reconnect again (seen under ``make chaos-partitions``). ``is_consuming`` tells the consumer
whether it consumes on the channel as it is now; the consumer starts afresh when it has not
for a while (``consumer/service.py``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any, cast

import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import AbstractRobustChannel
from pamqp.commands import Basic

log = logging.getLogger("jobrelay.broker")

RECONSUME_PAUSE_SECONDS = 1.0
CONSUME_TIMEOUT_SECONDS = 10.0  # a basic.consume unanswered this long is tried again


class RawDelivery:
    """One delivery: what the worker and the ack groups read of it, and its ack and nack."""

    __slots__ = ("deliver", "message", "tag")

    def __init__(self, message: aiormq.abc.DeliveredMessage) -> None:
        self.message = message
        # A consumer's delivery is a Basic.Deliver, which carries its tag.
        self.deliver = cast(Basic.Deliver, message.delivery)
        if self.deliver.delivery_tag is None:
            raise ValueError("a delivery without a delivery tag")
        self.tag: int = self.deliver.delivery_tag

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def redelivered(self) -> bool | None:
        return self.deliver.redelivered

    @property
    def delivery_tag(self) -> int | None:
        return self.tag

    @property
    def channel(self) -> aiormq.abc.AbstractChannel:
        return self.message.channel

    @property
    def properties(self) -> Basic.Properties:
        return self.message.header.properties

    @property
    def headers(self) -> dict[str, Any]:
        return self.message.header.properties.headers or {}

    async def ack(self, multiple: bool = False) -> None:
        await self.message.channel.basic_ack(self.tag, multiple=multiple)

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await self.message.channel.basic_nack(self.tag, multiple=multiple, requeue=requeue)


class Subscription:
    """A manual-ack consumer of ``queue`` on a robust channel, ``on_delivery`` called for each
    delivery (synchronously, in aiormq's task of it: it should start its own work and return)."""

    def __init__(
        self,
        channel: AbstractRobustChannel,
        queue: str,
        on_delivery: Callable[[RawDelivery], None],
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.on_delivery = on_delivery
        self.tag = f"jobrelay-{uuid.uuid4().hex}"
        self.cancelled = False
        self.consuming_on: aiormq.abc.AbstractChannel | None = None  # where consume succeeded
        self.again: asyncio.Task[None] | None = None  # consuming again after a reopen

    async def start(self) -> None:
        self.channel.reopen_callbacks.add(self._reopened)
        await self._consume()

    async def cancel(self) -> None:
        """No more deliveries (those unacked stay the consumer's to settle)."""
        self.cancelled = True
        self.channel.reopen_callbacks.discard(self._reopened)
        if self.again is not None:
            self.again.cancel()
        underlay = await self.channel.get_underlay_channel()
        await underlay.basic_cancel(self.tag)

    async def is_consuming(self) -> bool:
        """Whether deliveries can come: the consume succeeded on the channel as it is now, and
        that channel is open."""
        try:
            underlay = await self.channel.get_underlay_channel()
        except aiormq.exceptions.ChannelInvalidStateError:
            return False  # not reopened yet
        return underlay is self.consuming_on and not underlay.is_closed

    async def _consume(self) -> None:
        underlay = await self.channel.get_underlay_channel()
        async with asyncio.timeout(CONSUME_TIMEOUT_SECONDS):
            await underlay.basic_consume(
                self.queue, self._deliver, no_ack=False, consumer_tag=self.tag
            )
        self.consuming_on = underlay

    async def _deliver(self, message: aiormq.abc.DeliveredMessage) -> None:
        self.on_delivery(RawDelivery(message))

    async def _reopened(self, *_: Any) -> None:
        """The robust channel reopened (its queues declared again): consume again, in a task of
        its own, so that aio-pika's reconnect loop, which awaits this, goes on at once."""
        if self.again is not None:
            self.again.cancel()
        if not self.cancelled:
            self.again = asyncio.create_task(self._consume_again())

    async def _consume_again(self) -> None:
        """Consume on the reopened channel, retrying while it lives; a closed channel ends it
        (its next reopen starts another)."""
        while not self.cancelled:
            try:
                await self._consume()
                return
            except Exception as error:
                try:
                    underlay = await self.channel.get_underlay_channel()
                except aiormq.exceptions.ChannelInvalidStateError:
                    return
                if underlay.is_closed:
                    return  # the next reopen calls again
                log.warning(
                    "could not consume %s again after a reconnect (%s); retrying",
                    self.queue,
                    type(error).__name__,
                    extra={"event": "reconsume_failed", "queue": self.queue},
                )
                await asyncio.sleep(RECONSUME_PAUSE_SECONDS)
