"""The dispatcher's maintenance, in a task of its own beside the relay loop (so a slow sweep never
delays relaying), the listener and the scheduler (``jobrelay.dispatcher.service``).

Every ``interval``: rescue of expired job leases (docs/life-of-a-job.md), folding the job count
deltas the stats read, the backlog gauge, retention (every ``retention_interval``) and the
healing of ``jobrelay.dispatcher.healing`` (lost messages and the quarantine queue).
Outages of either server skip a round; nothing here stops the dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.relay import OutboxStore
from jobrelay.core.states import JobState
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.eventloop import stopped_within

log = logging.getLogger(__name__)

# One batch of a retention statement: (limit) -> rows deleted.
DeleteBatch = Callable[[int], Awaitable[int]]
# One round of healing; returns how many new outbox rows it wrote (the relay wakes then).
Healing = Callable[[], Awaitable[int]]


@dataclass(frozen=True)
class MaintenanceConfig:
    interval: float = 5.0
    rescue_batch_size: int = 100
    retention_seconds: float = 7 * 24 * 3600.0
    quarantine_retention_seconds: float | None = None  # None: kept until replayed
    retention_batch_size: int = 500
    retention_interval: float = 60.0


class Maintenance:
    """``run()`` until ``stopping`` is set (the relay's, in the dispatcher); ``wake`` is called
    when the outbox got rows that are due now (the relay's ``wake``)."""

    def __init__(
        self,
        store: OutboxStore,
        config: MaintenanceConfig,
        metrics: DispatcherMetrics | None = None,
        *,
        healing: Healing | None = None,
        wake: Callable[[], None] = lambda: None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or DispatcherMetrics()
        self.healing = healing
        self.wake = wake
        self.stopping = stopping or asyncio.Event()

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_retention = loop.time()
        while not self.stopping.is_set():
            try:
                await self.rescue_expired_leases()
                await self.store.fold_job_counts()  # keeps what the stats read a few rows
                self.metrics.oldest_due_age.set(await self.store.oldest_due_age())
                if loop.time() >= next_retention:
                    await self.apply_retention()
                    next_retention = loop.time() + self.config.retention_interval
            except StoreUnavailable as error:
                log.warning("maintenance skipped: %s", error, extra={"event": "outage"})
            except Exception:
                log.exception("maintenance failed", extra={"event": "maintenance_failed"})
            await self._heal_round()
            await stopped_within(self.stopping, self.config.interval)

    async def _heal_round(self) -> None:
        """Guarded on its own: its failures never stop rescues and retention, nor theirs it."""
        if self.healing is None:
            return
        try:
            if await self.healing():
                self.wake()  # lost messages got new outbox rows, due now
        except StoreUnavailable as error:
            log.warning("healing skipped: %s", error, extra={"event": "outage"})
        except Exception:
            log.exception("healing failed", extra={"event": "maintenance_failed"})

    async def rescue_expired_leases(self) -> int:
        """Expired `running` jobs back to `queued` with a new outbox row, once per expiry."""
        total = 0
        while True:
            rescued = await self.store.rescue_expired_leases(self.config.rescue_batch_size)
            for job_id in rescued:
                log.info(
                    "lease expired; job queued again",
                    extra={"event": "lease_expired", "job_id": str(job_id)},
                )
            total += len(rescued)
            self.metrics.rescued.inc(len(rescued))
            if rescued:
                self.wake()  # their new outbox rows are due now
            if len(rescued) < self.config.rescue_batch_size:
                return total

    async def apply_retention(self) -> tuple[int, int]:
        """Delete published outbox rows and finished jobs past their retention (with their
        results, journal and outbox rows), in small batches; returns (outbox rows, jobs)."""
        config = self.config
        deleted_outbox = await self._delete_in_batches(
            partial(self.store.delete_published, config.retention_seconds)
        )
        deleted_jobs = 0
        for state, seconds in self._retained_states():
            deleted_jobs += await self._delete_in_batches(
                partial(self.store.delete_finished_jobs, state, seconds)
            )
        if deleted_outbox or deleted_jobs:
            self.metrics.retention_deleted.labels(table="outbox").inc(deleted_outbox)
            self.metrics.retention_deleted.labels(table="jobs").inc(deleted_jobs)
            log.info(
                "retention: deleted %d outbox rows and %d finished jobs",
                deleted_outbox,
                deleted_jobs,
                extra={"event": "retention"},
            )
        return deleted_outbox, deleted_jobs

    def _retained_states(self) -> list[tuple[JobState, float]]:
        """Which finished jobs retention deletes, and after how long."""
        kept = [(JobState.SUCCEEDED, self.config.retention_seconds)]
        kept.append((JobState.CANCELLED, self.config.retention_seconds))
        if self.config.quarantine_retention_seconds is not None:
            kept.append((JobState.QUARANTINED, self.config.quarantine_retention_seconds))
        return kept

    async def _delete_in_batches(self, delete: DeleteBatch) -> int:
        total = 0
        while not self.stopping.is_set():
            deleted = await delete(self.config.retention_batch_size)
            total += deleted
            if deleted < self.config.retention_batch_size:
                break
            await asyncio.sleep(0)  # let the relay run between batches
        return total
