"""Publish outbox rows to RabbitMQ with publisher confirms and returns as errors
(docs/life-of-a-job.md; the failures: docs/failure-points.md).

One plain (not robust) connection with one confirming channel. When it breaks, every publish in
flight fails with "connection_lost" (the outcome is unknown: the row stays unpublished and a
later publish may duplicate it), the publisher forgets the connection, and the next
``connect()`` opens a new one and declares the topology again. Reconnecting ourselves keeps the
order of events simple: no publish ever waits on a background reconnect. ``url`` may list the
nodes of a cluster: the new connection goes to the first that answers (broker/connection.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence, Set
from functools import partial
from typing import Any

import aio_pika
import aiormq
import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from opentelemetry.trace import Span

from jobrelay import telemetry
from jobrelay.broker.blocking import BlockWatch
from jobrelay.broker.connection import connect_broker, unavailable
from jobrelay.broker.topology import declare_topology, declare_type_queues
from jobrelay.core.message import CONTENT_TYPE, Envelope, trace_headers
from jobrelay.core.relay import (
    CHANNEL_ERROR,
    CONNECTION_LOST,
    NACKED,
    TIMEOUT,
    UNEXPECTED,
    UNROUTABLE,
    OutboxRow,
    PublishOutcome,
)
from jobrelay.core.settings import mask_url
from jobrelay.eventloop import cancel_and_wait

log = logging.getLogger(__name__)

# Outcomes after which the connection is not used again. A nack too: on RabbitMQ 3.10, a channel
# that first published to a quorum queue while the queue had no leader (its node had just died)
# is nacked for good, while a new channel's publishes are confirmed (docs/cluster.md).
REOPEN_AFTER = (CONNECTION_LOST, CHANNEL_ERROR, NACKED)


def _message_fields(row: OutboxRow, traceparent: str | None) -> dict[str, Any]:
    """The properties of one outbox row's message: short, persistent, identified by outbox and
    job id, with the trace context (``traceparent``: the publish span's; else the job's) in its
    headers. The same names in aio-pika's Message and in AMQP's (pamqp's) properties."""
    return {
        "headers": trace_headers(traceparent or row.traceparent),
        "content_type": CONTENT_TYPE,
        "delivery_mode": aio_pika.DeliveryMode.PERSISTENT.value,
        "message_id": str(row.id),
        "correlation_id": str(row.job_id),
        "priority": 0,  # what aio-pika's Message sets when none is given
    }


def _body(row: OutboxRow) -> bytes:
    return Envelope(job_id=row.job_id, type=row.type).encode()


def build_message(row: OutboxRow, traceparent: str | None = None) -> aio_pika.Message:
    """The message for one outbox row, as aio-pika's Message (a quarantine copy is built from
    it, ``broker/quarantine.py``); the relay sends the same properties through aiormq."""
    return aio_pika.Message(body=_body(row), **_message_fields(row, traceparent))


async def _publish(
    channel: aiormq.abc.AbstractChannel,
    exchange: str,
    row: OutboxRow,
    traceparent: str | None = None,
) -> object:
    """One row's publish on the channel under aio-pika's Channel, until its confirm.

    aio-pika's Message and Exchange.publish only wrap this: building the Message (an attribute
    check per property set) and the wrapper were a tenth of the dispatcher's CPU (issue 28's
    profile, ``benchmarks/_cpu_profile.py``)."""
    return await channel.basic_publish(
        _body(row),
        exchange=exchange,
        routing_key=row.type,
        properties=aiormq.spec.Basic.Properties(**_message_fields(row, traceparent)),
        mandatory=True,
    )


def classify(error: BaseException) -> tuple[str, str]:
    """A publish failure as (reason, safe detail). Never includes a URL or a message body."""
    if isinstance(error, aiormq.exceptions.PublishError):
        frame: Any = error.args[1] if len(error.args) > 1 else None
        text = getattr(frame, "reply_text", None) or "returned"
        return UNROUTABLE, f"{text} (no queue bound for this routing key)"
    if isinstance(error, aiormq.exceptions.DeliveryError):
        return NACKED, "broker answered basic.nack"
    if isinstance(error, TimeoutError):
        return TIMEOUT, "no confirm within the publish timeout"
    if isinstance(
        error, aiormq.exceptions.ChannelInvalidStateError | ConnectionError | OSError
    ):  # ConnectionClosed and AMQPConnectionError are ConnectionErrors
        return CONNECTION_LOST, type(error).__name__
    if isinstance(error, aiormq.exceptions.AMQPChannelError):
        return CHANNEL_ERROR, mask_url(str(error))[:200] or type(error).__name__
    return UNEXPECTED, type(error).__name__


class Publisher:
    def __init__(
        self,
        url: str,
        *,
        publish_timeout: float,
        delivery_limit: int,
        type_queues: dict[str, str] | None = None,
        connect_timeout: float = 5.0,
        group_size: int | None = None,
    ) -> None:
        self.url = url  # one URL or a cluster's list (broker/connection.py)
        self.publish_timeout = publish_timeout
        self.delivery_limit = delivery_limit
        self.type_queues = type_queues or {}
        self.connect_timeout = connect_timeout
        self.group_size = group_size
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._underlay: aiormq.abc.AbstractChannel | None = None  # the publishes go on it
        # The types whose queue this connection declared: one declaration per type and
        # connection, never one per publish.
        self._type_queues: set[str] = set()
        self._blocks = BlockWatch()

    @property
    def blocked_reason(self) -> str | None:
        """Why the broker blocks publishing now (``low on memory``…); None while it does not."""
        return self._blocks.reason if self.ready else None

    async def wait_unblocked(self) -> None:
        await self._blocks.wait_unblocked()

    @property
    def ready(self) -> bool:
        return (
            self._exchange is not None
            and self._channel is not None
            and not self._channel.is_closed
            and self._connection is not None
            and not self._connection.is_closed
        )

    async def connect(self) -> None:
        if self.ready:
            return
        await self._forget()
        connection = await connect_broker(
            self.url, seconds=self.connect_timeout, name="jobrelay-dispatcher"
        )
        try:
            async with asyncio.timeout(self.connect_timeout):
                channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
                exchange = await declare_topology(
                    channel,
                    delivery_limit=self.delivery_limit,
                    type_queues=self.type_queues,
                    group_size=self.group_size,
                )
                underlay = await channel.get_underlay_channel()
        except BaseException as error:
            with contextlib.suppress(Exception):
                await connection.close()
            if isinstance(error, Exception):
                raise unavailable(self.url, error, seconds=self.connect_timeout) from None
            raise
        self._blocks.attach(connection)
        self._connection, self._channel, self._exchange = connection, channel, exchange
        self._underlay = underlay
        log.info("broker connected", extra={"event": "broker_connected"})

    async def publish_batch(self, rows: Sequence[OutboxRow]) -> list[PublishOutcome]:
        """Start every publish, then wait for all confirms; one outcome per row, in order.

        The relay keeps up to two batches in flight on the one channel: a batch that finds its
        connection broken forgets it only if it is still the current one, never a newer one
        that the other batch's ``connect()`` opened meanwhile."""
        if not rows:
            return []
        exchange, channel, connection = self._exchange, self._underlay, self._connection
        if exchange is None or channel is None or not self.ready:
            return [PublishOutcome(row, CONNECTION_LOST, "not connected") for row in rows]
        try:
            await self._declare_type_queues(rows)
        except Exception as error:
            reason = classify(error)
            if self._connection is connection:
                await self._forget()
            return [PublishOutcome(row, *reason) for row in rows]
        if telemetry.enabled():
            publishes = self._start_traced(channel, exchange.name, rows)
        else:
            # One deadline for the batch, not one per publish: a timer (and, on Python 3.11, a
            # task) per message cost more than the publish itself.
            publishes = [
                asyncio.ensure_future(_publish(channel, exchange.name, row)) for row in rows
            ]
        try:
            _, late = await asyncio.wait(publishes, timeout=self.publish_timeout)
        except BaseException:  # cancelled (the relay stopping): none of them outlives the batch
            await cancel_and_wait(publishes)
            raise
        await cancel_and_wait(late)
        outcomes = [
            _outcome(row, publish, late) for row, publish in zip(rows, publishes, strict=True)
        ]
        broken = any(outcome.reason in REOPEN_AFTER for outcome in outcomes)
        if broken and self._connection is connection:
            await self._forget()
        return outcomes

    async def _declare_type_queues(self, rows: Sequence[OutboxRow]) -> None:
        """Each new type's queue and binding before its first publish (the broker would
        otherwise route it to the shared default queue, where any consumer may get it)."""
        new = sorted({row.type for row in rows} - self._type_queues)
        if not new or self._channel is None:
            return
        async with asyncio.timeout(self.connect_timeout):
            await declare_type_queues(
                self._channel,
                new,
                delivery_limit=self.delivery_limit,
                group_size=self.group_size,
            )
        self._type_queues.update(new)

    @staticmethod
    def _start_traced(
        channel: aiormq.abc.AbstractChannel, exchange: str, rows: Sequence[OutboxRow]
    ) -> list[asyncio.Future[Any]]:
        """``publish_batch``'s publishes with a PRODUCER span each, ended by the broker's
        answer to that message (its confirm, a nack or return, or the batch giving up on it)."""
        publishes: list[asyncio.Future[Any]] = []
        for row in rows:
            span, traceparent = telemetry.publish_span(row)
            publish = asyncio.ensure_future(_publish(channel, exchange, row, traceparent))
            publish.add_done_callback(partial(_end_span, span))
            publishes.append(publish)
        return publishes

    async def close(self) -> None:
        await self._forget()

    async def _forget(self) -> None:
        connection = self._connection
        self._connection = self._channel = self._exchange = self._underlay = None
        self._type_queues = set()
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), self.connect_timeout)


def _end_span(span: Span, publish: asyncio.Future[Any]) -> None:
    if publish.cancelled():  # no confirm within the publish timeout, or the relay stopping
        telemetry.end_publish_span(span, (TIMEOUT, "no confirm before the publish was given up"))
        return
    error = publish.exception()
    telemetry.end_publish_span(span, None if error is None else classify(error))


def _outcome(
    row: OutboxRow, publish: asyncio.Future[Any], late: Set[asyncio.Future[Any]]
) -> PublishOutcome:
    """A publish's outcome: confirmed, or why not."""
    if publish in late:
        return PublishOutcome(row, *classify(TimeoutError()))
    if publish.cancelled():
        # Not by us (the late ones are ours): aiormq cancels the confirms it waits for when it
        # gives up on a connection that stopped answering (missed heartbeats).
        return PublishOutcome(row, CONNECTION_LOST, "confirm cancelled: connection lost")
    error = publish.exception()
    if error is None:
        return PublishOutcome(row)
    if not isinstance(error, Exception):  # pragma: no cover - a cancel from outside
        raise error
    return PublishOutcome(row, *classify(error))
