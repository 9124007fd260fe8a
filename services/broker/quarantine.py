"""The quarantine queue seen from the broker: peek at messages, remove some, purge.

Peeking uses ``basic.get`` without ack and then closes the channel, which returns every message
to the queue: nothing is lost if the process dies half-way. Removal acks only the messages of
the given jobs, on the same principle.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from services.core.message import Envelope, MalformedMessage
from services.core.topology import QUARANTINE_QUEUE, quarantine_queue_arguments

PEEK_LIMIT = 10_000


@dataclass(frozen=True)
class QuarantinedMessage:
    message_id: str | None
    job_id: uuid.UUID | None
    job_type: str | None
    malformed: str | None  # why the body is not an envelope, or None
    reason: str | None  # x-death reason of the first death: rejected, delivery_limit, ...
    queue: str | None  # the queue it died in
    deaths: int
    died_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "job_id": str(self.job_id) if self.job_id else None,
            "type": self.job_type,
            "malformed": self.malformed,
            "reason": self.reason,
            "queue": self.queue,
            "deaths": self.deaths,
            "died_at": self.died_at.isoformat() if self.died_at else None,
        }


def describe(message: AbstractIncomingMessage) -> QuarantinedMessage:
    headers: dict[str, Any] = dict(message.headers or {})
    raw_deaths = headers.get("x-death")
    # RabbitMQ keeps the most recent death first.
    deaths: list[dict[str, Any]] = [
        death
        for death in (raw_deaths if isinstance(raw_deaths, list) else [])
        if isinstance(death, dict)
    ]
    first: dict[str, Any] = deaths[-1] if deaths else {}
    try:
        envelope: Envelope | None = Envelope.decode(message.body)
        malformed = None
    except MalformedMessage as error:
        envelope, malformed = None, str(error)
    job_id = envelope.job_id if envelope else _uuid_or_none(message.correlation_id)
    reason = headers.get("x-first-death-reason") or first.get("reason")
    queue = headers.get("x-first-death-queue") or first.get("queue")
    died_at = first.get("time")
    return QuarantinedMessage(
        message_id=message.message_id,
        job_id=job_id,
        job_type=envelope.type if envelope else None,
        malformed=malformed,
        reason=_text(reason),
        queue=_text(queue),
        deaths=sum(int(death.get("count", 1)) for death in deaths),
        died_at=died_at if isinstance(died_at, datetime) else None,
    )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _uuid_or_none(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


async def peek(connection: AbstractConnection, limit: int = PEEK_LIMIT) -> list[QuarantinedMessage]:
    """Every message in the quarantine queue (up to ``limit``), left in place."""
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(
            QUARANTINE_QUEUE, durable=True, arguments=quarantine_queue_arguments()
        )
        seen: list[QuarantinedMessage] = []
        while len(seen) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            seen.append(describe(message))
        return seen
    finally:
        await channel.close()  # returns every unacked message to the queue


async def remove_jobs(connection: AbstractConnection, job_ids: Iterable[uuid.UUID]) -> int:
    """Ack (delete) the quarantined messages of these jobs; leave every other message."""
    wanted = set(job_ids)
    if not wanted:
        return 0
    channel = await connection.channel()
    removed = 0
    try:
        queue = await channel.declare_queue(
            QUARANTINE_QUEUE, durable=True, arguments=quarantine_queue_arguments()
        )
        for _ in range(PEEK_LIMIT):
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            if describe(message).job_id in wanted:
                await message.ack()
                removed += 1
        return removed
    finally:
        await channel.close()


async def purge(connection: AbstractConnection) -> int:
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(
            QUARANTINE_QUEUE, durable=True, arguments=quarantine_queue_arguments()
        )
        result = await queue.purge()
        return int(getattr(result, "message_count", 0) or 0)
    finally:
        await channel.close()
