"""Keeping a claimed job's lease while its handler runs (docs/life-of-a-job.md, step 3): the
heartbeat renews it, carries a client's cancel of the running job to the handler, and ends the
attempt when the lease cannot be kept; a stopping consumer gives the job back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from jobrelay.consumer.handler_call import HandlerRun
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.core.durable import Suspended
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.execution import Claimed, ExecutionStore, LeaseTerms, Renewal
from jobrelay.eventloop import cancel_and_wait

# How often a running job's heartbeat asks whether its cancel was requested, between renewals.
CANCEL_POLL_SECONDS = 1.0


class LeaseEnd(StrEnum):
    """Why the heartbeat ended an attempt."""

    CANCEL_REQUESTED = "cancel_requested"  # the job's client asked to cancel it
    TAKEN = "taken"  # the database says the job is no longer ours
    UNREACHABLE = "unreachable"  # the database stayed away until the lease ran out


@dataclass(frozen=True)
class LeaseLost:
    reason: LeaseEnd  # TAKEN or UNREACHABLE
    seconds: float


@dataclass(frozen=True)
class CancelRequested:
    """The job's client asked to cancel it: the handler was stopped after ``seconds``."""

    seconds: float


HeldRun = HandlerRun | LeaseLost | CancelRequested


class LeaseKeeper:
    """The lease of one consumer's attempts: ``lease_seconds`` long, renewed every
    ``heartbeat_interval``, a cancel polled for every ``cancel_poll_interval`` between."""

    def __init__(
        self,
        store: ExecutionStore,
        metrics: ConsumerMetrics,
        *,
        lease_seconds: float,
        heartbeat_interval: float,
        cancel_poll_interval: float,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.lease_seconds = lease_seconds
        self.heartbeat_interval = heartbeat_interval
        self.cancel_poll_interval = cancel_poll_interval

    async def watch(
        self,
        handler: asyncio.Task[HandlerRun],
        heartbeat: Callable[[], Coroutine[Any, Any, LeaseEnd]],
        deadline: float,
    ) -> HeldRun:
        """Wait for the handler, under ``heartbeat`` (``self.heartbeat`` of its claim) once the
        first renewal or cancel poll is due: the handler's run, or why the heartbeat ended it.
        Cancelled (shutdown), it stops both before it passes the cancel on."""
        started = time.monotonic()
        beating: asyncio.Task[LeaseEnd] | None = None
        try:
            # Most handlers end before the first renewal or cancel poll is due: their heartbeat
            # never starts.
            await asyncio.wait({handler}, timeout=self._first_beat_in(deadline))
            if not handler.done():
                beating = asyncio.create_task(heartbeat())
                await asyncio.wait({handler, beating}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await cancel_and_wait([handler, *([beating] if beating else [])])
            raise
        if beating is not None and beating.done():  # the lease is gone, or a cancel asked
            return await _stop_handler(handler, beating.result(), started)
        if beating is not None:
            await cancel_and_wait([beating])
        return handler.result()

    def _first_beat_in(self, deadline: float) -> float:
        first = min(self.heartbeat_interval, self.cancel_poll_interval)
        return max(0.0, min(first, deadline - time.monotonic()))

    async def heartbeat(self, claim: Claimed, deadline: float) -> LeaseEnd:
        """Keep the lease and watch for a cancel request; return (ending the attempt) why the
        attempt must end: a cancel, or the lease cannot be kept.

        It renews the lease every ``heartbeat_interval`` (lease/3), and the renewal says in the
        same statement whether a cancel was requested. Between renewals it polls for that alone
        every ``cancel_poll_interval`` (1 s), so a cancel takes effect within about a second
        however long the lease. The cost: a renewal writes a row version (and an entry in the
        index on ``lease_until``), so renewals stay at lease/3; a poll only reads by primary
        key, and the polls of one consumer's jobs fall on one shared grid of the loop's clock
        (``_until_next_beat``), where ``PgExecutionStore`` makes one statement of them: about
        one read a second per consumer process, not per running job.
        """
        job_id, lease = claim.job.id, LeaseTerms(claim.lease_token, self.lease_seconds)
        interval = self.heartbeat_interval
        renew_at = deadline - self.lease_seconds + interval  # the claim was the last renewal
        while True:
            asked = time.monotonic()
            if asked < renew_at:
                if await self._cancel_requested(claim, lease):
                    return LeaseEnd.CANCEL_REQUESTED
            else:
                try:
                    async with asyncio.timeout(max(0.1, min(interval, deadline - asked))):
                        renewal = await self.store.renew(job_id, lease)
                except (StoreUnavailable, TimeoutError):
                    self.metrics.store_errors.inc()
                    if time.monotonic() >= deadline:
                        return LeaseEnd.UNREACHABLE
                    renew_at = time.monotonic() + min(interval, self.cancel_poll_interval)
                else:
                    if renewal is Renewal.LOST:
                        return LeaseEnd.TAKEN
                    self.metrics.lease_renewals.inc()
                    if renewal is Renewal.CANCEL_REQUESTED:
                        return LeaseEnd.CANCEL_REQUESTED
                    deadline, renew_at = asked + self.lease_seconds, asked + interval
            await asyncio.sleep(self._until_next_beat(renew_at, deadline))

    async def _cancel_requested(self, claim: Claimed, lease: LeaseTerms) -> bool:
        """The poll between renewals. A failed one answers no: the next renewal decides."""
        try:
            async with asyncio.timeout(self.cancel_poll_interval):
                return await self.store.cancel_requested(claim.job.id, lease)
        except (StoreUnavailable, TimeoutError):
            self.metrics.store_errors.inc()
            return False

    def _until_next_beat(self, renew_at: float, deadline: float) -> float:
        """The pause until the next renewal, or the next poll if that comes first. Polls fall
        on multiples of ``cancel_poll_interval`` of the loop's clock, the same for every
        heartbeat of this process, so that they wake in one turn of the loop."""
        now, poll = time.monotonic(), self.cancel_poll_interval
        loop_now = asyncio.get_running_loop().time()
        next_poll = (loop_now // poll + 1) * poll - loop_now
        return max(0.01, min(renew_at - now, next_poll, deadline - now))

    async def release(self, claim: Claimed) -> None:
        """Give the job back (shutdown), so that its requeued message can claim it at once
        instead of waiting for the lease to expire. Unreachable database: the lease expires
        on its own and the dispatcher rescues the job."""
        with contextlib.suppress(StoreUnavailable):
            await self.store.release(
                claim.job.id, lease_token=claim.lease_token, detail="released: consumer stopping"
            )


async def _stop_handler(
    handler: asyncio.Task[HandlerRun], why: LeaseEnd, started: float
) -> HeldRun:
    """End an attempt the heartbeat ended: an ``async`` handler is cancelled at its next
    await; a plain one's thread runs on to its end and its result is dropped. A handler that
    had ended already reports its own end: a cancel request is moot then, and so is a lease
    its sleep gave up (``Suspended``: the job is asleep, committed with the lease's end)."""
    if handler.done() and (why is LeaseEnd.CANCEL_REQUESTED or _slept(handler)):
        return handler.result()
    await cancel_and_wait([handler])
    seconds = time.monotonic() - started
    if why is LeaseEnd.CANCEL_REQUESTED:
        return CancelRequested(seconds)
    return LeaseLost(why, seconds)


def _slept(handler: asyncio.Task[HandlerRun]) -> bool:
    return not handler.cancelled() and isinstance(handler.result().interrupt, Suspended)
