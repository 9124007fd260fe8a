"""The quarantine queue seen from the broker: peek at messages, hold them, remove some, purge.

Peeking uses ``basic.get`` without ack and then closes the channel, which returns every message
to the queue: nothing is lost if the process dies half-way. Removal holds the messages the same
way, acks only the chosen ones, and lets the channel's close return the rest.

Which messages may go (docs/invariants.md, invariant 8: every quarantined job has exactly one
message once the system is quiet, and nothing removes the message of a later quarantine) is
decided by ``plan_sweep``, a pure function of the held messages and their jobs' states.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aio_pika.exceptions
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from jobrelay.core.execution import ForwardingDelivery
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.states import JobState
from jobrelay.core.topology import (
    QUARANTINE_EXCHANGE,
    QUARANTINE_QUEUE,
)

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

    @property
    def outbox_id(self) -> int | None:
        """The outbox row the dispatcher published this message for (its ``message_id``)."""
        return outbox_id(self.message_id)

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


def outbox_id(message_id: str | None) -> int | None:
    if message_id is None or not message_id.isascii() or not message_id.isdigit():
        return None
    return int(message_id)


def _uuid_or_none(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


async def peek(connection: AbstractConnection, limit: int = PEEK_LIMIT) -> list[QuarantinedMessage]:
    """Every message in the quarantine queue (up to ``limit``), left in place."""
    channel = await connection.channel()
    try:
        queue = await quarantine_queue(channel)
        seen: list[QuarantinedMessage] = []
        while queue is not None and len(seen) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            seen.append(describe(message))
        return seen
    finally:
        await channel.close()  # returns every unacked message to the queue


async def quarantine_queue(channel: AbstractChannel) -> AbstractQueue | None:
    """The quarantine queue as it is (a passive declare), or None before any service declared
    it: reading or purging it never creates it, nor compares its arguments with ours (its
    replica count, say: docs/cluster.md). The topology declares it (broker/topology.py)."""
    try:
        return await channel.declare_queue(QUARANTINE_QUEUE, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return None


@dataclass
class Held:
    """Messages taken from the quarantine queue without ack, in queue order."""

    messages: list[AbstractIncomingMessage] = field(default_factory=list)
    seen: list[QuarantinedMessage] = field(default_factory=list)

    async def ack(self, indexes: Collection[int]) -> int:
        """Delete these messages (by index); the others go back when the hold ends."""
        for index in sorted(set(indexes)):
            await self.messages[index].ack()
        return len(set(indexes))


@asynccontextmanager
async def hold(connection: AbstractConnection, limit: int = PEEK_LIMIT) -> AsyncIterator[Held]:
    """Hold every message of the quarantine queue (up to ``limit``) for the block. Closing the
    channel at the end returns every message not acked, also when the block fails or the
    process dies."""
    channel = await connection.channel()
    try:
        queue = await quarantine_queue(channel)
        held = Held()
        while queue is not None and len(held.messages) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            held.messages.append(message)
            held.seen.append(describe(message))
        yield held
    finally:
        await channel.close()  # returns every unacked message to the queue


# --- which messages may go ------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPlan:
    remove: list[int]  # indexes of the held messages to ack (delete)
    surplus: int  # second copies of a quarantined job's message
    stale: int  # messages of jobs that are no longer quarantined

    @property
    def removed(self) -> int:
        return len(self.remove)


def plan_sweep(
    messages: Sequence[QuarantinedMessage], states: Mapping[uuid.UUID, JobState]
) -> SweepPlan:
    """Which held messages go, given their jobs' states read AFTER the messages were taken.

    - A quarantined job keeps exactly one message: the one of the highest outbox id (the
      latest publish), the first in queue order among equals; the others are surplus (a
      redelivered copy the consumer dead-lettered, a row published twice).
    - A job that is not quarantined needs none. A consumer dead-letters a message only after
      the job's quarantine has committed, so a message already in the queue when its job is
      seen not quarantined belongs to a quarantine that has since been replayed: it is stale.
      The message of a later quarantine reaches the queue after that quarantine commits, hence
      after this read of the states, so it is never among the held messages judged stale.
    - Except a message the broker dead-lettered on its own (``delivery_limit``) of a live job:
      reconciliation quarantines its job (or waits while a live lease runs). Of a succeeded or
      cancelled job it is stale too.
    - A message that names no job, or a job not in the database, stays for an operator.
    """
    remove: list[int] = []
    surplus = stale = 0
    keep: dict[uuid.UUID, int] = {}  # quarantined job -> index of the message it keeps
    for index, message in enumerate(messages):
        job_id = message.job_id
        state = states.get(job_id) if job_id is not None else None
        if job_id is None or state is None:
            continue
        if state == JobState.QUARANTINED:
            kept = keep.setdefault(job_id, index)
            if kept == index:
                continue
            surplus += 1
            if _rank(message) > _rank(messages[kept]):
                remove.append(kept)
                keep[job_id] = index
            else:
                remove.append(index)
            continue
        live = state in (JobState.QUEUED, JobState.RETRYING, JobState.RUNNING)
        if message.reason == "delivery_limit" and live:
            continue
        stale += 1
        remove.append(index)
    return SweepPlan(sorted(remove), surplus, stale)


def _rank(message: QuarantinedMessage) -> int:
    return message.outbox_id if message.outbox_id is not None else -1


async def purge(connection: AbstractConnection) -> int:
    channel = await connection.channel()
    try:
        queue = await quarantine_queue(channel)
        if queue is None:
            return 0
        result = await queue.purge()
        return int(getattr(result, "message_count", 0) or 0)
    finally:
        await channel.close()


# --- dead-lettering by hand -----------------------------------------------------------------

# Headers the broker writes when it dead-letters a message; a publisher's own are not trusted.
DEATH_HEADERS = ("x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")


def broker_can_dead_letter(message: AbstractIncomingMessage) -> bool:
    """False when the message carries an ``x-death`` header the broker did not write for us.

    RabbitMQ updates ``x-death`` when it dead-letters a message, and on a value it does not
    expect (3.10: an array holding anything but its own tables) the queue process crashes — on
    every retry, until the node gives up on all of its quorum queues. The dispatcher never sets
    the header, so a work-queue message that has one came from another publisher (or was moved
    back from the quarantine by hand): such a message is dead-lettered by hand instead.
    """
    return "x-death" not in (message.headers or {})


class DeadLetterByHand(ForwardingDelivery):
    """A delivery whose ``nack(requeue=False)`` publishes a copy to the quarantine exchange,
    without the untrusted death headers, and acks the original only after the broker confirmed
    the copy (the consumer's channel is in confirm mode). The copy is marked as a dead letter
    of ``queue`` with reason ``rejected``, as the broker would have marked it."""

    def __init__(self, message: AbstractIncomingMessage, queue: str) -> None:
        super().__init__(message)
        self.message = message
        self.queue = queue

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        if requeue:
            await self.message.nack(multiple=multiple, requeue=True)
            return
        message = self.message
        headers: dict[str, Any] = {
            key: value for key, value in (message.headers or {}).items() if key not in DEATH_HEADERS
        }
        headers |= {"x-first-death-reason": "rejected", "x-first-death-queue": self.queue}
        properties = aiormq.spec.Basic.Properties(
            content_type=message.content_type,
            content_encoding=message.content_encoding,
            headers=headers,
            delivery_mode=2,
            correlation_id=message.correlation_id,
            message_id=message.message_id,
            timestamp=message.timestamp,
            message_type=message.type,
            app_id=message.app_id,
        )
        await message.channel.basic_publish(
            message.body,
            exchange=QUARANTINE_EXCHANGE,
            routing_key=self.queue,
            properties=properties,
        )
        await message.ack()
