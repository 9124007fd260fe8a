"""The quarantine queue seen from the broker: peek at messages, hold them, remove some, purge.

Peeking uses ``basic.get`` without ack and then closes the channel, which returns every message
to the queue: nothing is lost if the process dies half-way. Removal holds the messages the same
way, acks only the chosen ones, and lets the channel's close return the rest.

Which messages may go (docs/invariants.md, invariant 8: every quarantined job has exactly one
message once the system is quiet, and nothing removes the message of a later quarantine), and
which quarantined jobs get their missing message back, is decided by ``plan_sweep``, a pure
function of the held messages, their jobs' states and the quarantined jobs with no held message.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import aio_pika
import aio_pika.exceptions
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from jobrelay.broker.deliveries import RawDelivery
from jobrelay.broker.publisher import build_message
from jobrelay.core.jobs import QuarantinedJob
from jobrelay.core.message import Envelope, MalformedMessage
from jobrelay.core.relay import OutboxRow
from jobrelay.core.states import JobState
from jobrelay.core.topology import (
    QUARANTINE_EXCHANGE,
    QUARANTINE_QUEUE,
)

PEEK_LIMIT = 10_000
RESTORE_PUBLISH_TIMEOUT = 10.0  # seconds for the broker's confirm of one restored message
# A quarantined job whose message is missing gets it back only once this long has passed both
# since its quarantine committed (a consumer dead-letters right after that commit, within its
# 10 s settle timeout: a message on its way must not be doubled) and since a sweep first saw it
# missing, every sweep meanwhile too (one look can miss messages: held by a sweep that lost its
# lock to a database restart, or by a channel on a dead node until the broker notices). A copy
# that turns up later anyway is a surplus, which the next sweep removes.
RESTORE_GRACE_SECONDS = 20.0
# The header that tells a restored message from one the broker dead-lettered (its value: when).
RESTORED_HEADER = "x-jobrelay-restored"


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
    # True when the queue exists and every message of it is held (none left past the limit):
    # only then does a job with no held message have none at all.
    complete: bool = False

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
                held.complete = True
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
    # Quarantined jobs with no message, quarantined over the grace ago: publish theirs again.
    restore: list[QuarantinedJob] = field(default_factory=list)
    # Quarantined jobs with no message, not restored yet (within the grace) -> when a sweep
    # first saw them missing: the next sweep's ``missing_since``.
    missing_since: dict[uuid.UUID, datetime] = field(default_factory=dict)
    due_in: float | None = None  # seconds until the first of those passes the grace

    @property
    def waiting(self) -> int:
        return len(self.missing_since)

    @property
    def removed(self) -> int:
        return len(self.remove)


def plan_sweep(
    messages: Sequence[QuarantinedMessage],
    states: Mapping[uuid.UUID, JobState],
    unheld: Sequence[QuarantinedJob] = (),
    *,
    now: datetime | None = None,
    missing_since: Mapping[uuid.UUID, datetime] | None = None,
    grace_seconds: float = RESTORE_GRACE_SECONDS,
) -> SweepPlan:
    """Which held messages go, given their jobs' states read AFTER the messages were taken, and
    which quarantined jobs of ``unheld`` (read after the hold too) get their message back.

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
    - A quarantined job with no held message (the caller held the whole queue) has none: its
      dead-letter was lost (a consumer that lost its delivery to a node fault, the copy then
      acked as a duplicate while the job still ran). The database is the truth: its message
      is published again once ``grace_seconds`` have passed since the quarantine and since
      the earlier sweep that first saw it missing (``missing_since``, which every sweep since
      saw missing too; ``now``: the database's clock, as ``quarantined_at``), so that neither
      a dead-letter on its way nor a message a single look missed is doubled; if one is
      anyway, the next sweep removes the surplus.
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
    held_jobs = {message.job_id for message in messages}
    missing = [job for job in unheld if job.job_id not in held_jobs]
    restores = _restores(missing, now, missing_since or {}, timedelta(seconds=grace_seconds))
    return SweepPlan(sorted(remove), surplus, stale, *restores)


def _restores(
    missing: Sequence[QuarantinedJob],
    now: datetime | None,
    missing_since: Mapping[uuid.UUID, datetime],
    grace: timedelta,
) -> tuple[list[QuarantinedJob], dict[uuid.UUID, datetime], float | None]:
    """(the jobs past the grace; the others with their first sighting; seconds until the first
    of those is due)."""
    if now is None:
        return [], {}, None
    due: list[QuarantinedJob] = []
    waiting: dict[uuid.UUID, datetime] = {}
    waits: list[float] = []
    for job in missing:
        seen = missing_since.get(job.job_id, now)
        left = (max(job.quarantined_at, seen) + grace - now).total_seconds()
        if left <= 0:
            due.append(job)
        else:
            waiting[job.job_id] = seen
            waits.append(left)
    return due, waiting, min(waits, default=None)


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


# --- a lost message restored -----------------------------------------------------------------


def restored_message(job: QuarantinedJob, queue: str, now: datetime) -> aio_pika.Message:
    """The message a consumer's dead-letter of ``job``'s delivery from ``queue`` leaves in the
    quarantine queue: the dispatcher's message for the job (``build_message``: body, trace
    context, ids) marked as ``DeadLetterByHand`` marks one (reason ``rejected``, the queue),
    and restored (``RESTORED_HEADER``, when). No ``x-death``: that one is the broker's alone."""
    row = OutboxRow(job.outbox_id or 0, job.job_id, job.job_type, 0, job.traceparent)
    message = build_message(row)
    message.headers = {
        **(message.headers or {}),
        "x-first-death-reason": "rejected",
        "x-first-death-queue": queue,
        RESTORED_HEADER: now.isoformat(),
    }
    if job.outbox_id is None:  # its outbox rows are gone (retention): no id to claim
        message.message_id = None
    return message


async def restore(
    connection: AbstractConnection, messages: Sequence[tuple[aio_pika.Message, str]]
) -> int:
    """Publish ``(message, routing key)`` pairs to the quarantine exchange, one at a time, each
    confirmed by the broker (a nack or a return raises: the sweep fails and the next one tries
    again). Returns how many were confirmed."""
    if not messages:
        return 0
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    try:
        exchange = await channel.get_exchange(QUARANTINE_EXCHANGE, ensure=False)
        for message, routing_key in messages:
            await exchange.publish(
                message, routing_key=routing_key, mandatory=True, timeout=RESTORE_PUBLISH_TIMEOUT
            )
    finally:
        await channel.close()
    return len(messages)


# --- dead-lettering by hand -----------------------------------------------------------------

# Headers the broker writes when it dead-letters a message; a publisher's own are not trusted.
DEATH_HEADERS = ("x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")


def broker_can_dead_letter(message: RawDelivery) -> bool:
    """False when the message carries an ``x-death`` header the broker did not write for us.

    RabbitMQ updates ``x-death`` when it dead-letters a message, and on a value it does not
    expect (3.10: an array holding anything but its own tables) the queue process crashes — on
    every retry, until the node gives up on all of its quorum queues. The dispatcher never sets
    the header, so a work-queue message that has one came from another publisher (or was moved
    back from the quarantine by hand): such a message is dead-lettered by hand instead.
    """
    return "x-death" not in message.headers


UnderlayChannel = Callable[[], Awaitable[aiormq.abc.AbstractChannel]]


class LateDeadLetter:
    """A delivery (``broker/deliveries.py``) as the worker settles it (``core/execution.py``'s
    ``Delivery``), which can still reach the quarantine after its ack: a long job acked early
    (docs/long-jobs.md) that then ends quarantined. ``dead_letter_after_ack`` publishes the copy
    the broker would have dead-lettered, on ``channel()``, the consumer's channel as it is now
    (the one the message came on may have closed since: a reconnect), in confirm mode."""

    def __init__(self, message: RawDelivery, queue: str, channel: UnderlayChannel) -> None:
        self.message = message
        self.queue = queue
        self.channel = channel

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def redelivered(self) -> bool | None:
        return self.message.redelivered

    async def ack(self, multiple: bool = False) -> None:
        await self.message.ack(multiple=multiple)

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await self.message.nack(multiple=multiple, requeue=requeue)

    async def dead_letter_after_ack(self) -> None:
        await publish_dead_letter(await self.channel(), self.message, self.queue)


class DeadLetterByHand(LateDeadLetter):
    """A delivery whose ``nack(requeue=False)`` publishes a copy to the quarantine exchange,
    without the untrusted death headers, and acks the original only after the broker confirmed
    the copy (the consumer's channel is in confirm mode)."""

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        if requeue:
            await self.message.nack(multiple=multiple, requeue=True)
            return
        await publish_dead_letter(self.message.channel, self.message, self.queue)
        await self.message.ack()


async def publish_dead_letter(
    channel: aiormq.abc.AbstractChannel, message: RawDelivery, queue: str
) -> None:
    """Publish a copy of ``message`` to the quarantine exchange, marked as a dead letter of
    ``queue`` with reason ``rejected`` as the broker would have marked it (what the sweep and
    the replay read: ``describe``), without the death headers a publisher may have forged.
    Raises unless the broker confirmed it."""
    headers: dict[str, Any] = {
        key: value for key, value in message.headers.items() if key not in DEATH_HEADERS
    }
    headers |= {"x-first-death-reason": "rejected", "x-first-death-queue": queue}
    original = message.properties
    properties = aiormq.spec.Basic.Properties(
        content_type=original.content_type,
        content_encoding=original.content_encoding,
        headers=headers,
        delivery_mode=2,
        correlation_id=original.correlation_id,
        message_id=original.message_id,
        timestamp=original.timestamp,
        message_type=original.message_type,
        app_id=original.app_id,
    )
    confirmation = await channel.basic_publish(
        message.body, exchange=QUARANTINE_EXCHANGE, routing_key=queue, properties=properties
    )
    if confirmation is not None and not isinstance(confirmation, aiormq.spec.Basic.Ack):
        raise aiormq.exceptions.DeliveryError(None, confirmation)
