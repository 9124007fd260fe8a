"""The relay loop (docs/life-of-a-job.md): lease due outbox rows, publish them, record the
broker's answer.

How transactions stay short: leasing is one committed statement that pushes the rows'
``available_at`` past the publish deadline (``lease_seconds``); the broker round trip happens
with no transaction open; the outcome is a second short statement. Another dispatcher skips
leased rows; a crashed dispatcher's rows come due again when the lease passes, so a crash can
publish a row twice but never loses one.

How it keeps the broker busy: at most two batches are in flight. While one batch waits for its
confirms, the next is leased and published; then the first one's outcome is recorded. Every row
is still marked published only after its own confirm, and ``stop()`` lets both finish.

What is leased is the window's choice (``jobrelay.dispatcher.window``): the relay window per
work queue, then priority, clients in turn, pauses and limits. Without a ``RelayWindow`` every
due row is leased oldest first.

Maintenance (rescue of expired job leases, retention, the backlog gauge, the healing) is
``jobrelay.dispatcher.maintenance``, which the dispatcher runs beside this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from jobrelay.core.errors import BrokerUnavailable, StoreUnavailable
from jobrelay.core.relay import MessagePublisher, OutboxRow, OutboxStore, PublishOutcome
from jobrelay.core.retry import backoff
from jobrelay.core.telemetry_context import trace_id_of
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.dispatcher.window import RelayWindow
from jobrelay.eventloop import stopped_within

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelayConfig:
    batch_size: int = 200
    poll_interval: float = 1.0
    # How long leased rows stay invisible to other dispatchers: must cover the publish timeout
    # plus marking the outcome. A crashed dispatcher's rows come due again after it.
    lease_seconds: float = 22.0
    # Backoff of a row whose publish failed, growing with its publish attempts.
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 60.0
    # Backoff of the loop itself while the database or the broker is unreachable.
    outage_base_seconds: float = 0.2
    outage_max_seconds: float = 5.0
    # How often a broker's block of publishing is reported again (in the stats) while it lasts.
    maintenance_interval: float = 5.0
    mark_retries: int = 3


def publish_retry_delay(
    publish_attempts: int, config: RelayConfig, rng: random.Random | None = None
) -> float:
    """Delay before a failed row is tried again: exponential in its attempts, capped, jittered
    so a burst of failures spreads out."""
    return backoff(publish_attempts, config.retry_base_seconds, config.retry_max_seconds, rng)


@dataclass
class BatchResult:
    leased: int = 0
    published: int = 0
    failed: dict[str, int] = field(default_factory=dict)


@dataclass
class InFlight:
    """A leased batch whose publishes are on their way: ``confirms`` gives one outcome a row."""

    rows: list[OutboxRow]
    confirms: asyncio.Task[list[PublishOutcome]]
    full: bool


class Relay:
    def __init__(
        self,
        store: OutboxStore,
        publisher: MessagePublisher,
        config: RelayConfig,
        metrics: DispatcherMetrics | None = None,
        *,
        rng: random.Random | None = None,
        name: str = "dispatcher",
        window: RelayWindow | None = None,
    ) -> None:
        self.window = window
        self.name = name  # how the stats name this dispatcher (host:pid)
        self.store = store
        self.publisher = publisher
        self.config = config
        self.metrics = metrics or DispatcherMetrics()
        self.rng = rng or random.Random()
        self.wakeup = asyncio.Event()
        self.stopping = asyncio.Event()
        self._publishing: set[asyncio.Task[list[PublishOutcome]]] = set()
        self._outages = 0

    def wake(self) -> None:
        """Called by the listener on NOTIFY: new rows may be due."""
        self.wakeup.set()

    def stop(self) -> None:
        """Finish the batches in flight, then return from ``run``."""
        self.stopping.set()
        self.wakeup.set()

    # --- one batch ---------------------------------------------------------------------------

    async def start_batch(self) -> InFlight | None:
        """Lease a batch and start publishing it; None when nothing is due."""
        await self.publisher.connect()  # no lease is taken while the broker is unreachable
        if self.window is None:
            rows = await self.store.lease_batch(self.config.batch_size, self.config.lease_seconds)
        else:
            rows = await self.window.lease(self.config.batch_size, self.config.lease_seconds)
        if not rows:
            return None
        self.metrics.batch_size.observe(len(rows))
        confirms = asyncio.create_task(self.publisher.publish_batch(rows), name="relay-publish")
        self._publishing.add(confirms)
        confirms.add_done_callback(self._publishing.discard)
        return InFlight(rows, confirms, full=len(rows) >= self.config.batch_size)

    async def finish_batch(self, batch: InFlight) -> BatchResult:
        """Wait for the batch's confirms and record them: published, or failed with a backoff."""
        try:
            outcomes = await batch.confirms
        finally:
            if self.window is not None:
                self.window.settled(batch.rows)
        result = BatchResult(leased=len(batch.rows))
        confirmed = [outcome.row for outcome in outcomes if outcome.confirmed]
        failures = [outcome for outcome in outcomes if not outcome.confirmed]
        if confirmed:
            await self._mark_published(confirmed)
            result.published = len(confirmed)
            self.metrics.published.inc(len(confirmed))
        if failures:
            await self._mark_failed(failures)
            for outcome in failures:
                reason = str(outcome.reason)
                result.failed[reason] = result.failed.get(reason, 0) + 1
            for reason, count in result.failed.items():
                self.metrics.failures.labels(reason=reason).inc(count)
            self._log_failures(failures)
        return result

    async def _mark_published(self, rows: Sequence[OutboxRow]) -> None:
        """Record confirms. A database outage here is retried briefly: once the lease passes,
        the rows would be published a second time."""
        for attempt in range(self.config.mark_retries + 1):
            try:
                await self.store.mark_published(rows)
                return
            except StoreUnavailable:
                if attempt == self.config.mark_retries:
                    raise
                await asyncio.sleep(self._outage_delay(attempt))

    async def _mark_failed(self, failures: Sequence[PublishOutcome]) -> None:
        groups: dict[tuple[str, float], list[int]] = {}
        for outcome in failures:
            delay = round(
                publish_retry_delay(outcome.row.publish_attempts, self.config, self.rng), 1
            )
            groups.setdefault((outcome.error_text, delay), []).append(outcome.row.id)
        for (error, delay), ids in groups.items():
            await self.store.mark_failed(ids, error, delay)

    def _log_failures(self, failures: Sequence[PublishOutcome]) -> None:
        first = failures[0]
        extra: dict[str, object] = {
            "event": "publish_failed",
            "reason": first.reason,
            "outbox_id": first.row.id,
            "job_id": str(first.row.job_id),
        }
        if first.row.traceparent is not None:  # the line names the job: its trace too
            extra["trace_id"] = trace_id_of(first.row.traceparent)
        log.warning(
            "publish failed for %d row(s): %s", len(failures), first.error_text, extra=extra
        )

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Relay until ``stop()``; outages of either server are waited out, never fatal."""
        in_flight: InFlight | None = None
        try:
            while not (self.stopping.is_set() and in_flight is None):
                if in_flight is None and self._blocked():
                    await self._wait_while_blocked()
                    continue
                in_flight, result = await self._step(in_flight)
                if in_flight is not None or result is None or self.stopping.is_set():
                    continue  # a batch in flight to record, or an outage just waited out
                if result.leased >= self.config.batch_size and not result.failed:
                    continue  # a full batch: there is probably more
                await self._wait_for_work()
        finally:
            for task in self._publishing:
                task.cancel()
            await asyncio.gather(*self._publishing, return_exceptions=True)

    async def _step(self, in_flight: InFlight | None) -> tuple[InFlight | None, BatchResult | None]:
        """Lease and publish the next batch when ``in_flight`` is full (or absent), then record
        ``in_flight``'s outcome. Returns the batch now in flight and the recorded result: an
        empty one when nothing was due, None after an outage (already waited out)."""
        started: InFlight | None = None
        outage: StoreUnavailable | BrokerUnavailable | None = None
        if not self.stopping.is_set() and self._lease_ahead(in_flight):
            self.wakeup.clear()
            try:
                started = await self.start_batch()
            except (StoreUnavailable, BrokerUnavailable) as error:
                outage = error
        result: BatchResult | None = BatchResult()
        if in_flight is not None:
            try:
                result = await self.finish_batch(in_flight)
            except (StoreUnavailable, BrokerUnavailable) as error:
                outage = outage or error  # its rows come due again when their lease passes
        if outage is not None:
            await self._wait_out(outage)
            return started, None
        if self._outages:
            log.info("relaying again", extra={"event": "recovered"})
            self._outages = 0
        return started, result

    def _lease_ahead(self, in_flight: InFlight | None) -> bool:
        """Nothing in flight, or a full batch on a live connection (with a broken one, its
        confirms are failing and connecting again would only delay recording them)."""
        if in_flight is None:
            return True
        return in_flight.full and self.publisher.ready and not self._blocked()

    # --- a broker that blocks publishing ------------------------------------------------------

    def _blocked(self) -> bool:
        return self.publisher.blocked_reason is not None and not self.stopping.is_set()

    async def _wait_while_blocked(self) -> None:
        """Lease nothing while the broker blocks publishing (a memory or disk alarm): every
        publish would only wait for its timeout. The API goes on accepting into the outbox
        meanwhile. Said in the log, the ``broker_blocked`` gauge and the stats (re-reported
        every maintenance interval) until it ends."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        reason = self.publisher.blocked_reason
        log.warning(
            "the broker blocks publishing (%s): relaying paused, accepted jobs wait in the outbox",
            reason,
            extra={"event": "broker_blocked", "reason": reason},
        )
        self.metrics.broker_blocked.set(1)
        self.metrics.broker_blocks.inc()
        while (reason := self.publisher.blocked_reason) is not None and not self.stopping.is_set():
            with contextlib.suppress(StoreUnavailable):
                await self.store.report_broker_block(self.name, reason)
            await self._until_unblocked(self.config.maintenance_interval)
        self.metrics.broker_blocked.set(0)
        with contextlib.suppress(StoreUnavailable):
            await self.store.clear_broker_block(self.name)
        log.info(
            "the broker unblocked publishing after %.1fs: relaying again",
            loop.time() - started,
            extra={"event": "broker_unblocked"},
        )

    async def _until_unblocked(self, seconds: float) -> None:
        """Until publishing is unblocked, ``stop()`` or ``seconds``, whichever first."""
        waits = [
            asyncio.create_task(self.publisher.wait_unblocked()),
            asyncio.create_task(self.stopping.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _wait_out(self, error: StoreUnavailable | BrokerUnavailable) -> None:
        delay = self._outage_delay(self._outages)
        self._outages += 1
        log.warning(
            "%s; retrying in %.1fs", error, delay, extra={"event": "outage", "reason": error.code}
        )
        await self._sleep(delay)

    async def _wait_for_work(self) -> None:
        """Until NOTIFY, the next row's due time, the poll interval or stop, whichever first.
        Rows due but held back (a full window, a pause, a limit) are tried again after the
        flow's recheck interval, not at once. Woken already (a NOTIFY while the last batch
        was out): no wait, so the due time is not asked for either, a round trip that would
        only delay the new rows."""
        if self.wakeup.is_set():
            return
        timeout = self.config.poll_interval
        try:
            due_in = await self.store.next_due_in()
        except StoreUnavailable:
            due_in = None
        held_for = None if self.window is None else self.window.recheck_in
        if held_for is not None:
            timeout = min(timeout, held_for)
        if due_in is not None and (due_in > 0 or held_for is None):
            timeout = min(timeout, max(0.0, due_in))
        if timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), timeout)

    async def _sleep(self, seconds: float) -> None:
        await stopped_within(self.stopping, seconds)

    def _outage_delay(self, outages: int) -> float:
        return backoff(
            outages + 1, self.config.outage_base_seconds, self.config.outage_max_seconds, self.rng
        )
