"""A cheap reachability check of the broker, for ``/readyz``.

A probe runs every few seconds on every API process: opening an AMQP connection each time would
be a connection storm on the broker. ``BrokerProbe`` keeps one connection per process, opened at
the first probe, reused by the next ones, opened again when the broker closed it, and closed
at shutdown. A probe on an open connection is one round trip (``basic.qos`` on its channel,
which touches no queue or exchange) within ``timeout_seconds``.

The same connection answers the operators' figures of the work queues (``queue_depths``: a
passive ``queue.declare`` per queue, ``broker/depth.py``, for ``GET /v1/admin/queues``, the
console and ``jobrelay queues list``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from aio_pika.abc import AbstractChannel, AbstractConnection

from jobrelay.broker.connection import cause_of, connect_broker
from jobrelay.broker.depth import queue_depths
from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.relay import QueueDepth
from jobrelay.core.settings import mask_url

CONNECTION_NAME = "jobrelay-readyz"


class BrokerProbe:
    def __init__(self, url: str, *, timeout_seconds: float = 3.0) -> None:
        self.url = url
        self.timeout_seconds = timeout_seconds
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._lock = asyncio.Lock()  # concurrent probes share one connection attempt

    async def check(self) -> None:
        """Raises ``BrokerUnavailable`` unless the broker answers within ``timeout_seconds``.
        A connection found closed, or that fails its round trip, is dropped and one new
        connection is tried in the same probe."""
        try:
            async with asyncio.timeout(self.timeout_seconds), self._lock:
                if await self._answers():
                    return
                await self._drop()
                if not await self._answers():
                    raise BrokerUnavailable(f"broker at {mask_url(self.url)} does not answer")
        except TimeoutError:
            raise await self._timed_out() from None

    async def queue_depths(self, names: Sequence[str]) -> dict[str, QueueDepth]:
        """Each work queue's ready messages and consumers (``names``: short names, as in
        ``--queue``), by a passive declare on a channel of the kept connection opened for them;
        a queue the broker does not have holds nothing. ``BrokerUnavailable`` as ``check``."""
        try:
            async with asyncio.timeout(self.timeout_seconds), self._lock:
                try:
                    return await self._depths(names)
                except BrokerUnavailable:  # a kept connection the broker closed: a new one
                    await self._drop()
                    return await self._depths(names)
        except TimeoutError:
            raise await self._timed_out() from None

    async def _depths(self, names: Sequence[str]) -> dict[str, QueueDepth]:
        depths: dict[str, QueueDepth] = {}
        channel: AbstractChannel | None = None
        try:
            connection = await self._kept_connection()
            for name in names:
                if channel is None or channel.is_closed:  # a queue not found closes its channel
                    channel = await connection.channel(publisher_confirms=False)
                found = await queue_depths(channel, [name])
                depths[name] = found.get(name, QueueDepth(ready=0, consumers=0))
        except (BrokerUnavailable, TimeoutError):
            raise
        except Exception as error:  # closed by the broker, a broken socket
            raise BrokerUnavailable(f"broker at {mask_url(self.url)}: {cause_of(error)}") from None
        finally:
            if channel is not None and not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
        return depths

    async def _timed_out(self) -> BrokerUnavailable:
        """The error of a probe past ``timeout_seconds``; its connection is dropped."""
        await self._drop()
        return BrokerUnavailable(
            f"broker at {mask_url(self.url)}: {cause_of(TimeoutError(), self.timeout_seconds)}"
        )

    async def close(self) -> None:
        """At shutdown; a later ``check`` would connect again."""
        async with self._lock:
            await self._drop()

    async def _answers(self) -> bool:
        """One round trip on the kept channel (opened first when there is none); False when the
        kept connection or channel turned out to be broken. Raises ``BrokerUnavailable`` when
        no connection opens."""
        try:
            channel = await self._open_channel()
            await channel.set_qos(prefetch_count=0)
        except BrokerUnavailable:
            raise
        except Exception:  # closed by the broker, a broken socket: a new connection may do
            return False
        return True

    async def _kept_connection(self) -> AbstractConnection:
        if self._connection is None or self._connection.is_closed:
            await self._drop()
            self._connection = await connect_broker(
                self.url, seconds=self.timeout_seconds, name=CONNECTION_NAME
            )
        return self._connection

    async def _open_channel(self) -> AbstractChannel:
        connection = await self._kept_connection()
        if self._channel is None or self._channel.is_closed:
            self._channel = await connection.channel(publisher_confirms=False)
        return self._channel

    async def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), self.timeout_seconds)
