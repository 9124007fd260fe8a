"""The dispatcher's healing beside relaying (run by ``dispatcher/maintenance.py``):

1. **The quarantine queue** (docs/invariants.md, invariant 8): messages the broker
   dead-lettered on its own (``x-delivery-limit``) make their jobs quarantined
   (``delivery_limit``), and a quarantined job keeps exactly one message
   (``jobrelay.operations.sweep_quarantine``). A sweep holds the whole queue for a moment, so it
   runs only when the queue looks inconsistent — its ready count differs from the number of
   quarantined jobs and that picture changed since the last sweep that found nothing to do — and
   otherwise every ``FULL_SWEEP_SECONDS``. A quarantined job whose message is nowhere (its
   dead-letter lost to a broker-node fault) gets it published again from the database once
   ``RESTORE_GRACE_SECONDS`` have passed since its quarantine and since a sweep first saw it
   missing (every sweep meanwhile too); a sweep that sees one still within the grace runs
   again when the grace ends.

2. **Lost messages.** A message confirmed by the broker can still be lost afterwards (a broker
   whose data was lost, a purged queue); its job then stays ``queued`` for good. The dispatcher
   publishes such a job again when its message is *provably missing*:

   - the queues the job's message may be in were just seen holding no ready message: its
     type's own queue and the shared work queue of before (a message published by an older
     dispatcher), and
   - the job is due, every one of its outbox rows was published (confirmed) more than
     ``JOBRELAY_REDISPATCH_AFTER_SECONDS`` ago, and no consumer has claimed it since
     (``queued``/``retrying``; ``stranded_types`` in ``db/sql/quarantine.sql``).

   Why that proves it: a confirmed message is in its queue until a consumer takes it; once
   delivered, a consumer claims the job within milliseconds (or hands the message back to the
   queue, where it would be counted). The queue was read empty after the job's last publish (the
   threshold is far longer than the gap between the two reads), so the job's message was in no
   queue, and a consumer that had it would have claimed the job long ago. The one case the
   broker cannot show us is a delivery held unacknowledged by a consumer that is frozen without
   having claimed it (a SIGSTOPped process, a claim waiting out a database outage — bounded by
   the consumer's patience, 2 leases): then the copy is a harmless duplicate, which the claim
   turns into a ``duplicate_delivery``. Keep the threshold well above 2 leases.

   Never doubling a backlog: nothing is published for a queue that holds any ready message,
   however deep; what an empty queue gets back is exactly the jobs whose messages are missing
   (in batches of ``HEAL_BATCH``, the next one only once the queue is empty again). Several
   dispatchers take turns (an advisory lock), and a job is published again at most
   ``MAX_AUTOMATIC_REDISPATCHES`` times without a claim in between, so even a route that
   differs between processes cannot multiply messages. Each one is journaled (event
   ``redispatched``), counted in ``stats`` (``redispatched_last_hour``) and in the metric
   ``jobrelay_dispatcher_redispatched_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractConnection

from jobrelay.broker.connection import cause_of, connect_broker
from jobrelay.broker.topology import declare_type_queues
from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.retry import backoff
from jobrelay.core.settings import Settings
from jobrelay.core.topology import QUARANTINE_QUEUE, queue_of, type_queue_name
from jobrelay.db.quarantine_store import QuarantineStore
from jobrelay.db.store import Store
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.operations import SweepResult, sweep_quarantine

log = logging.getLogger(__name__)

FULL_SWEEP_SECONDS = 60.0
# A sweep that saw a message missing within its grace runs again this long after the grace.
RESTORE_SLACK_SECONDS = 1.0
HEAL_BATCH = 1000
# At most this many types with stranded jobs are looked at per round (a queue read each).
HEAL_TYPES = 100
MAX_AUTOMATIC_REDISPATCHES = 3

# What a lost or refused broker connection raises somewhere in aio-pika or aiormq.
BROKER_ERRORS = (
    BrokerUnavailable,
    aiormq.exceptions.AMQPError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    OSError,
    TimeoutError,
)


class Healer:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        metrics: DispatcherMetrics,
        *,
        type_queues: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.keeper = QuarantineStore(store)
        self.amqp_url = settings.amqp_url
        self.heal_after = settings.redispatch_after_seconds
        self.delivery_limit = settings.delivery_limit
        self.group_size = settings.quorum_group_size
        self.metrics = metrics
        self.type_queues = dict(type_queues or {})
        self.clock = clock
        self.full_sweep_seconds = FULL_SWEEP_SECONDS
        self._connection: AbstractConnection | None = None
        self._clean: tuple[int, int] | None = None  # (ready, quarantined) of the last idle sweep
        # Quarantined jobs the last sweep saw with no message -> when first seen so (the
        # database's clock): restored once sweeps a grace apart all saw them missing.
        self._missing_since: dict[uuid.UUID, datetime] = {}
        self._next_full_sweep = 0.0
        self._broker_down = False
        self._outages = 0
        self._retry_at = 0.0  # after a broker outage, not before (each try logs in aiormq)

    async def run_once(self) -> int:
        """One round; returns how many jobs got a new outbox row (the relay is woken then).
        A broker outage skips rounds, with a growing pause (logged once); database outages
        propagate."""
        if self.clock() < self._retry_at:
            return 0
        try:
            connection = await self._connect()
            async with contextlib.AsyncExitStack() as stack:
                channel = await self._channel(connection)
                stack.push_async_callback(_close_quietly, channel)
                await self.tidy_quarantine(connection, channel)
                healed = await self.heal(channel)
        except BROKER_ERRORS as error:
            await self.close()
            if not self._broker_down:
                log.warning(
                    "healing skipped: broker unreachable (%s)",
                    cause_of(error),
                    extra={"event": "outage"},
                )
            self._broker_down = True
            self._outages += 1
            self._retry_at = self.clock() + backoff(self._outages + 1, 1.0, 10.0)
            return 0
        except Exception:
            await self.close()  # whatever went wrong, the next round starts afresh
            raise
        self._broker_down = False
        self._outages = 0
        return healed

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 5)

    async def _connect(self) -> AbstractConnection:
        if self._connection is not None and not self._connection.is_closed:
            return self._connection
        self._connection = await connect_broker(
            self.amqp_url, seconds=5, name="jobrelay-dispatcher-healing"
        )
        return self._connection

    async def _channel(self, connection: AbstractConnection) -> AbstractChannel:
        try:
            return await connection.channel()
        except Exception as error:  # e.g. RuntimeError: the broker closed the connection
            raise BrokerUnavailable(
                f"broker connection lost ({type(error).__name__}); reconnecting"
            ) from None

    # --- the quarantine -----------------------------------------------------------------------

    async def tidy_quarantine(
        self, connection: AbstractConnection, channel: AbstractChannel
    ) -> None:
        ready = await _ready(channel, QUARANTINE_QUEUE)
        quarantined = await self.keeper.quarantined_count()
        now = self.clock()
        # Fewer messages than quarantined jobs (a dead-letter lost) looks off as much as more.
        looks_off = ready is None or ready != quarantined
        picture = (ready if ready is not None else -1, quarantined)
        if now < self._next_full_sweep and (not looks_off or picture == self._clean):
            return
        result = await sweep_quarantine(
            self.store,
            connection,
            wait_seconds=None,
            type_queues=self.type_queues,
            missing_since=self._missing_since,
        )
        if result is None:
            return  # another process holds the queue: next round
        self._missing_since = result.missing_since
        self._next_full_sweep = now + self._pause_after(result)
        self._clean = None if result.changed else picture
        if not result.changed:
            return
        self.metrics.quarantine_reconciled.inc(result.reconciled)
        self.metrics.quarantine_removed.labels(reason="surplus").inc(result.surplus)
        self.metrics.quarantine_removed.labels(reason="stale").inc(result.stale)
        self.metrics.quarantine_restored.inc(result.restored)
        log.info(
            "quarantine tidied: %d job(s) reconciled (delivery_limit), %d surplus and %d stale "
            "message(s) removed, %d missing message(s) restored",
            result.reconciled,
            result.surplus,
            result.stale,
            result.restored,
            extra={"event": "quarantine_swept"},
        )

    def _pause_after(self, result: SweepResult) -> float:
        """Until the next sweep of an unchanged picture: a full period, or less when a job
        with no message passes its grace sooner (the picture stays the same meanwhile, and a
        sweep that found nothing to do would otherwise wait a full period)."""
        if result.due_in is None:
            return self.full_sweep_seconds
        return min(self.full_sweep_seconds, result.due_in + RESTORE_SLACK_SECONDS)

    # --- lost messages ------------------------------------------------------------------------

    async def heal(self, channel: AbstractChannel) -> int:
        """Publish again the jobs whose messages are provably missing (module docstring): of
        each type with stranded jobs, when both queues its message may be in are empty, its
        own queue and the shared queue of before (a message published before the upgrade)."""
        if self.heal_after <= 0:
            return 0
        stranded = await self.keeper.stranded_types(
            older_than_seconds=self.heal_after, limit=HEAL_TYPES
        )
        empty = await self._empty_types(channel, stranded)
        if not empty:
            return 0
        healed = await self.keeper.heal_lost_messages(
            older_than_seconds=self.heal_after,
            default_empty=False,
            own_types=[],
            empty_own_types=empty,
            cap=MAX_AUTOMATIC_REDISPATCHES,
            limit=HEAL_BATCH,
            detail=(
                f"published again by the dispatcher: its work queue was empty while the job, "
                f"published over {self.heal_after:g}s ago, was never claimed"
            ),
        )
        if not healed:
            return 0
        for job in healed:
            self.metrics.redispatched.labels(queue=type_queue_name(job.type)).inc()
            log.warning(
                "message lost: job published again",
                extra={"event": "redispatched", "job_id": str(job.job_id), "type": job.type},
            )
        return len(healed)

    async def _empty_types(self, channel: AbstractChannel, job_types: list[str]) -> list[str]:
        """The types among ``job_types`` whose own queue and shared queue hold no ready
        message. A type's queue is declared, not read passively: a type whose messages all
        went to the shared queue before the upgrade has none yet."""
        shared_empty: dict[str, bool] = {}
        empty: list[str] = []
        for job_type in job_types:
            shared = queue_of(job_type, self.type_queues)
            if shared not in shared_empty:
                shared_empty[shared] = await _ready(channel, shared) == 0
            if not shared_empty[shared]:
                continue
            own = await declare_type_queues(
                channel,
                [job_type],
                delivery_limit=self.delivery_limit,
                group_size=self.group_size,
            )
            if not own[job_type].declaration_result.message_count:
                empty.append(job_type)
        return sorted(empty)


async def _ready(channel: AbstractChannel, queue: str) -> int | None:
    """Ready messages in a queue (a passive declare answers from the queue itself); None when
    the queue does not exist (its channel is then closed by the broker: the caller's round
    ends, and the next opens a new one)."""
    try:
        declared = await channel.declare_queue(queue, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return None
    return int(declared.declaration_result.message_count or 0)


async def _close_quietly(channel: AbstractChannel) -> None:
    with contextlib.suppress(Exception):
        await channel.close()
