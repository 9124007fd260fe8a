"""``jobrelay consumer``: wire settings, the registry, PostgreSQL and RabbitMQ, and run workers.

It takes the queue of each type it runs (``jobrelay.type.<type>``, those of its ``--queue``) and
the shared work queue of before (a rolling upgrade's messages: what it does not run there it
defers), and says which types it serves in ``job_types.served_until`` while it consumes
(docs/job-types.md, "Where a job goes").

Manual ack, prefetch = concurrency per queue taken (raised to the largest ``batch_size`` of its
batch types, docs/batch-handlers.md), at most that many deliveries processed at a time (the
others wait, unclaimed, for a slot), one task per delivery. A job still running after
``long_job_ack_seconds`` has its message acked early and stops counting toward the prefetch:
the broker sends one more message, so a consumer runs up to ``concurrency`` jobs that are not
long, plus its long ones (docs/long-jobs.md). SIGTERM stops taking deliveries, lets in-flight
jobs finish within the grace period, gives the rest back (their lease released, their message
requeued; a long job's lease is left to expire) and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiormq.abc
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from aio_pika.exceptions import ChannelInvalidStateError

from jobrelay.broker import quarantine
from jobrelay.broker.acks import AckRouter, GroupAcked
from jobrelay.broker.connection import cause_of, connect_broker_robust
from jobrelay.broker.deliveries import RawDelivery, Subscription
from jobrelay.broker.topology import (
    declare_topology,
    declare_type_queues,
    declare_work_queue,
    is_refusal,
)
from jobrelay.consumer.early_ack import broker_ack_timeout, early_ack_within
from jobrelay.consumer.limits import RuntimeLimits
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.worker import Worker
from jobrelay.core.errors import ConfigurationError, StoreUnavailable
from jobrelay.core.execution import Delivery
from jobrelay.core.message import traceparent_of
from jobrelay.core.registry import Registry
from jobrelay.core.retry import backoff_ceiling
from jobrelay.core.settings import Settings, mask_url, parse_type_queues
from jobrelay.core.topology import queue_of, queue_short_name, work_queue_name
from jobrelay.core.type_catalog import TypeStore, registrable_types
from jobrelay.db import queries as q
from jobrelay.db.durable_store import PgDurableStore
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.pooler import settle_pool_mode
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from jobrelay.eventloop import stopped_within
from jobrelay.handlers.loading import registry_for, require_job_types

log = logging.getLogger("jobrelay.consumer")

CONNECT_BACKOFF_START = 0.5
CONNECT_BACKOFF_CAP = 10.0
# While it consumes, a consumer says every SERVED_REFRESH_SECONDS that its types are served for
# SERVED_FOR_SECONDS: a consumer gone shows its types no_consumer within that (unless another
# serves them).
SERVED_REFRESH_SECONDS = 10.0
SERVED_FOR_SECONDS = 30.0
# A consumer whose queues have not been consumed on its channel as it is now for this long
# connects afresh: its robust connection reconnects within seconds when it can, and this
# catches the case it cannot (its reconnect loop held, seen in partitions: broker/deliveries.py).
# While no node can serve, the fresh connection waits as the first did.
STUCK_SECONDS = 20.0
WATCH_INTERVAL_SECONDS = 1.0


async def run_consumer(
    settings: Settings,
    *,
    queue: str = "default",
    concurrency: int | None = None,
    handlers: str | None = None,
) -> int:
    """The ``jobrelay consumer`` command; returns the process exit status.

    ``handlers`` (``--handlers``) overrides JOBRELAY_HANDLERS."""
    try:
        registry = require_job_types(registry_for(settings, handlers))
        routes = parse_type_queues(settings.type_queues)
    except (ConfigurationError, ValueError) as error:
        log.error("cannot start: %s", error, extra={"event": "configuration_error"})
        return 2
    # After the checks above: a consumer that cannot start says only why, not the probe's word.
    settings = await asyncio.to_thread(settle_pool_mode, settings)
    log.info(
        "job types: %s",
        ", ".join(sorted(registry.types)),
        extra={"event": "job_types", "types": ",".join(sorted(registry.types))},
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        consumer = Consumer(
            settings,
            registry,
            queue=queue,
            concurrency=concurrency or settings.consumer_concurrency,
            type_queues=routes,
        )
        return await consumer.run(stop)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


class Consumer:
    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        queue: str = "default",
        concurrency: int = 8,
        type_queues: dict[str, str] | None = None,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.queue_name = work_queue_name(queue)
        self.concurrency = concurrency
        self.type_queues = type_queues or {}
        # A batch needs its batch_size deliveries in hand at once (docs/batch-handlers.md):
        # the prefetch and the slots are raised to the largest batch of the types it takes.
        self.prefetch = max(concurrency, registry.largest_batch(self.own_types))
        self.metrics = metrics or ConsumerMetrics()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.acks = AckRouter()
        self.worker: Worker | None = None
        # The connection consumed on: a new one only when the consumer connects afresh.
        self.connection: AbstractRobustConnection | None = None
        # Robust: the same object across reconnects.
        self.channel: AbstractRobustChannel | None = None
        self.consuming = False
        self.stopping = False  # set once: deliveries waiting for a slot are not begun then
        # Several queues each deliver up to the prefetch: the slots keep ``concurrency``.
        self.slots = asyncio.Semaphore(self.prefetch)

    @property
    def own_types(self) -> list[str]:
        """The types whose queues it takes: those it runs that route to its ``--queue``."""
        return sorted(
            job_type
            for job_type in self.registry.types
            if queue_of(job_type, self.type_queues) == self.queue_name
        )

    async def run(self, stop: asyncio.Event) -> int:
        settings = self.settings
        store = Store.connect(
            settings.database_url,
            pool_size=self.concurrency + 2,
            application_name="jobrelay-consumer",
            pool_mode=settings.pool_mode,
            schema=settings.database_schema,
        )
        short_name = queue_short_name(self.queue_name)
        execution = PgExecutionStore(store, queue=short_name)
        limits = RuntimeLimits(execution.runtime_limits)
        durable = PgDurableStore(store)  # handlers' steps, sleeps, signals and children
        self.worker = Worker(
            execution,
            self.registry,
            settings,
            self.metrics,
            runtime_limits=limits,
            durable=durable,
        )
        if settings.metrics_port:
            self.metrics.serve(settings.metrics_port)
        limits_read = asyncio.create_task(limits.keep_fresh(stop))
        try:
            await _register_queue(store, short_name, stop)
            await _register_types(PgTypeStore(store), self.registry, self.worker.name, stop)
            subscribed = await self._subscribe(stop)
            if subscribed is None:
                return 0 if stop.is_set() else 1
            self.connection, subscriptions = subscribed
            served = asyncio.create_task(self._keep_served(PgTypeStore(store), stop))
            try:
                await self._consume_until(stop, subscriptions)
            finally:
                served.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await served
                await _close(self.connection)  # unacked deliveries go back to the queue
        finally:
            limits_read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await limits_read
            await execution.close()
            await durable.close()
            await store.close()
        log.info("stopped", extra={"event": "consumer_stopped"})
        return 0 if stop.is_set() else 1  # else the broker refused a fresh setup

    async def _keep_served(self, types: PgTypeStore, stop: asyncio.Event) -> None:
        """Once subscribed, while its channel is open, its types are served: say so, again and
        again. A database outage skips a round (the types may then show no_consumer a while)."""
        while not stop.is_set():
            channel = self.channel
            if channel is not None and not channel.is_closed:
                try:
                    await types.mark_served(self.own_types, seconds=SERVED_FOR_SECONDS)
                except StoreUnavailable as error:
                    log.warning(
                        "types not marked served (%s)", error, extra={"event": "store_unavailable"}
                    )
            await stopped_within(stop, SERVED_REFRESH_SECONDS)

    async def _subscribe(
        self, stop: asyncio.Event
    ) -> tuple[AbstractRobustConnection, list[Subscription]] | None:
        """Connect (robustly: later drops reconnect by themselves), declare the topology and
        start consuming, again with a doubling pause while the broker is unreachable or goes
        away in between; None once stopped, or when the broker refuses the setup."""
        failures = 0
        while not stop.is_set():
            connection: AbstractRobustConnection | None = None
            try:
                connection = await connect_broker_robust(
                    self.settings.amqp_url, seconds=10, name="jobrelay-consumer"
                )
                return connection, await self._declare_and_consume(connection)
            except Exception as error:
                if connection is not None:
                    await _close(connection)
                    if is_refusal(error):
                        # E.g. a queue declared with other arguments (PRECONDITION_FAILED).
                        log.error(
                            "cannot consume from %s: %s",
                            self.queue_name,
                            _first_line(error),
                            extra={"event": "consumer_setup_failed"},
                        )
                        return None
                failures += 1
                pause = backoff_ceiling(failures, CONNECT_BACKOFF_START, CONNECT_BACKOFF_CAP)
                self._log_setback(error, pause, connected=connection is not None)
            await stopped_within(stop, pause)
        return None

    def _log_setback(self, error: Exception, pause: float, *, connected: bool) -> None:
        if connected:
            what = f"broker went away while subscribing to {self.queue_name}"
            event = "consumer_setup_interrupted"
        else:
            what = f"broker unreachable at {mask_url(self.settings.amqp_url)}"
            event = "broker_unavailable"
        log.warning(
            "%s (%s); retrying in %.1fs", what, cause_of(error), pause, extra={"event": event}
        )

    async def _declare_and_consume(
        self, connection: AbstractRobustConnection
    ) -> list[Subscription]:
        """Declare the topology and its types' queues, then consume the shared queue and each
        type's queue, at aiormq's level (``broker/deliveries.py``)."""
        settings = self.settings
        channel = await connection.channel()
        self.channel = channel
        channel.close_callbacks.add(self._on_channel_closed)
        # Per-consumer QoS: quorum queues refuse a global one.
        await channel.set_qos(prefetch_count=self.prefetch)
        await declare_topology(
            channel,
            delivery_limit=settings.delivery_limit,
            type_queues=self.type_queues,
            group_size=settings.quorum_group_size,
        )
        shared = await declare_work_queue(
            channel, self.queue_name, settings.delivery_limit, settings.quorum_group_size
        )
        own = await declare_type_queues(
            channel,
            self.own_types,
            delivery_limit=settings.delivery_limit,
            group_size=settings.quorum_group_size,
        )
        subscriptions = []
        for queue in [shared, *own.values()]:
            subscription = Subscription(channel, queue.name, partial(self._on_message, queue.name))
            await subscription.start()
            subscriptions.append(subscription)
        return subscriptions

    def _on_channel_closed(self, _channel: object, error: BaseException | None) -> None:
        """The broker closed the channel because a delivery stayed unacked past its
        ``consumer_timeout`` (every delivery of the channel went back): from now on long jobs
        are acked early within that timeout, so that it happens once (docs/long-jobs.md)."""
        timeout = broker_ack_timeout(str(error)) if error is not None else None
        if timeout is None or self.worker is None:
            return
        before = self.worker.long_job_ack_seconds
        after = early_ack_within(before, timeout)
        if after == before:
            return  # within it already (lowered, and said, at an earlier close)
        self.worker.long_job_ack_seconds = after
        log.warning(
            "the broker closed this consumer's channel: a delivery stayed unacked past its "
            "consumer_timeout (%gs), which is not above JOBRELAY_LONG_JOB_ACK_SECONDS (%gs); "
            "the jobs running went back to the queue and are not run twice (their leases hold "
            "them). From now on long jobs are acked after %gs: set "
            "JOBRELAY_LONG_JOB_ACK_SECONDS below the broker's consumer_timeout "
            "(docs/long-jobs.md)",
            timeout,
            before,
            after,
            extra={
                "event": "consumer_timeout_below_early_ack",
                "consumer_timeout_seconds": timeout,
                "long_job_ack_seconds": after,
            },
        )

    async def _consume_until(self, stop: asyncio.Event, subscriptions: list[Subscription]) -> None:
        self.consuming = True
        if self.prefetch > self.concurrency:
            log.info(
                "prefetch raised from %d to %d: the largest batch_size of its batch types",
                self.concurrency,
                self.prefetch,
                extra={"event": "batch_prefetch", "prefetch": self.prefetch},
            )
        log.info(
            "consuming",
            extra={
                "event": "consumer_started",
                "queue": self.queue_name,
                "concurrency": self.concurrency,
                "prefetch": self.prefetch,
                "types": ",".join(sorted(self.registry.types)),
                "type_queues": len(subscriptions) - 1,
            },
        )
        while not await self._stopped_or_stuck(stop, subscriptions):
            renewed = await self._connect_afresh(stop)
            if renewed is None:
                break
            subscriptions = renewed
        log.info("stopping: no new deliveries", extra={"event": "consumer_stopping"})
        self.consuming = False
        self.stopping = True
        if self.worker is not None:
            self.worker.batches.drain()  # gathered jobs are called now, not after batch_wait
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                for subscription in subscriptions:
                    await subscription.cancel()
        await self._drain()

    async def _stopped_or_stuck(
        self, stop: asyncio.Event, subscriptions: list[Subscription]
    ) -> bool:
        """Wait: True once ``stop`` is set; False once some queue has not been consumed on the
        channel as it is now for STUCK_SECONDS."""
        stuck_since: float | None = None
        while not await stopped_within(stop, WATCH_INTERVAL_SECONDS):
            consuming = [await subscription.is_consuming() for subscription in subscriptions]
            if all(consuming):
                stuck_since = None
            elif stuck_since is None:
                stuck_since = time.monotonic()
            elif time.monotonic() - stuck_since >= STUCK_SECONDS:
                return False
        return True

    async def _connect_afresh(self, stop: asyncio.Event) -> list[Subscription] | None:
        """Close the connection that does not consume (its unacked deliveries go back; the
        jobs running keep their leases, and their results stay single) and subscribe on a
        new one; None once stopped, or when the broker refuses the setup."""
        log.warning(
            "not consuming %s for %gs: connecting to the broker afresh",
            self.queue_name,
            STUCK_SECONDS,
            extra={"event": "consumer_reconnect_stuck", "queue": self.queue_name},
        )
        if self.connection is not None:
            await _close(self.connection)
        subscribed = await self._subscribe(stop)
        if subscribed is None:
            return None
        self.connection, subscriptions = subscribed
        return subscriptions

    def _on_message(self, queue: str, message: RawDelivery) -> None:
        """A delivery from ``queue`` (the one a quarantine copy names as where it died)."""
        # Our own task, not aio-pika's: a broker reconnect must not cancel a running handler.
        assert self.worker is not None
        by_hand = not quarantine.broker_can_dead_letter(message)
        wrapper = quarantine.DeadLetterByHand if by_hand else quarantine.LateDeadLetter
        settled_by: Delivery = wrapper(message, queue, self._underlay_channel)
        # Registered on arrival, in the broker's order: acks then go out in groups.
        delivery = GroupAcked(message, self.acks.groups_for(message), settled_by)
        traceparent = traceparent_of(message.headers)
        task = asyncio.create_task(self._in_slot(delivery, traceparent))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _in_slot(self, delivery: Delivery, traceparent: str | None) -> None:
        """Handle a delivery once one of the ``concurrency`` slots is free. A long job's slot
        is freed when its message is acked early, as its prefetch place is (docs/long-jobs.md)."""
        assert self.worker is not None
        await self.slots.acquire()
        freed = False

        def free() -> None:
            nonlocal freed
            if not freed:
                freed = True
                self.slots.release()

        try:
            if self.stopping:
                return  # not begun: given back when the connection closes
            await self.worker.handle(delivery, traceparent=traceparent, on_acked_early=free)
        finally:
            free()

    async def _underlay_channel(self) -> aiormq.abc.AbstractChannel:
        """The consumer's channel as it is now (a long job's late quarantine copy goes on it:
        the message's own channel may have closed since)."""
        if self.channel is None:
            raise ChannelInvalidStateError("the consumer has no channel")
        return await self.channel.get_underlay_channel()

    async def _drain(self) -> None:
        """Let in-flight jobs finish within the grace period; give the rest back."""
        if not self.tasks:
            return
        _, pending = await asyncio.wait(
            set(self.tasks), timeout=self.settings.shutdown_grace_seconds
        )
        if pending:
            log.warning(
                "grace period over: %d jobs given back",
                len(pending),
                extra={"event": "shutdown_requeue"},
            )
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=30)


async def _register_queue(store: Store, queue: str, stop: asyncio.Event) -> None:
    """The consumer's queue in ``queues`` (where its pause is kept), again with a doubling
    pause while the database is unreachable; an existing row, paused or not, is left alone."""

    async def register() -> None:
        await store.fetch_all(q.REGISTER_QUEUES, names=[queue])

    await _until_stored(register, f"queue {queue}", stop)


async def register_types(types: TypeStore, registry: Registry, by: str) -> int:
    """Every type of ``registry`` in ``job_types`` (the last writer wins each; none is
    deleted: another consumer may run it), so that an API without these handlers validates
    their submissions (docs/job-types.md). Returns how many were registered."""
    registered = registrable_types(registry, by=by)
    await types.register_types(registered)
    log.info(
        "job types registered: %d",
        len(registered),
        extra={"event": "job_types_registered", "types": ",".join(t.name for t in registered)},
    )
    return len(registered)


async def _register_types(
    types: TypeStore, registry: Registry, by: str, stop: asyncio.Event
) -> None:
    async def register() -> None:
        await register_types(types, registry, by)

    await _until_stored(register, "job types", stop)


async def _until_stored(
    write: Callable[[], Awaitable[None]], what: str, stop: asyncio.Event
) -> None:
    """``write()``, again with a doubling pause while the database is unreachable."""
    failures = 0
    while not stop.is_set():
        try:
            await write()
            return
        except StoreUnavailable as error:
            failures += 1
            pause = backoff_ceiling(failures, CONNECT_BACKOFF_START, CONNECT_BACKOFF_CAP)
            log.warning(
                "%s not registered (%s); retrying in %.1fs",
                what,
                error,
                pause,
                extra={"event": "store_unavailable"},
            )
            await stopped_within(stop, pause)


async def _close(connection: AbstractRobustConnection) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await connection.close()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
