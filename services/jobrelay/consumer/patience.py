"""The consumer through a database outage (docs/failure-points.md): a claim, a deferral or a
final write is retried with growing, jittered pauses up to a patience, and then given up, for
the delivery to be requeued instead; the broker's own retries wait longer. Back off, never spin.
A handler's durable calls (``PatientDurableStore``) are retried the same way; given up, their
``StoreUnavailable`` fails the attempt (a retry, the recorded steps kept).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.core.durable import (
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    DurableStore,
    Fence,
    Gone,
    SignalTaken,
    StepRecord,
    TimedOut,
)
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.retry import backoff

log = logging.getLogger("jobrelay.consumer")
T = TypeVar("T")


class Backoff:
    """Growing, jittered pauses while the database is unreachable: back off, never spin.

    Counted per call being retried, not shared by the workers: a shared count would grow with
    the number of workers and keep all of them asleep long after the database is back.
    """

    def __init__(self, base: float = 0.1, cap: float = 2.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()

    def before_requeue(self) -> float:
        """The pause before a delivery is handed back because the database stayed away."""
        return backoff(1, self.cap, self.cap, self.rng)

    def pause(self, failures: int) -> float:
        return backoff(failures, self.base, self.cap, self.rng)

    def before_republish(self, failures: int) -> float:
        """The pause before another try at a publish to the broker: ten times the database's,
        for a robust connection's reconnect takes seconds."""
        return backoff(failures, 10 * self.base, 10 * self.cap, self.rng)


class Patience:
    """``await patiently(call)``: the call, retried through a database outage with growing
    pauses for up to ``seconds``; past that its ``StoreUnavailable`` is raised."""

    def __init__(self, seconds: float, backoff: Backoff, metrics: ConsumerMetrics) -> None:
        self.seconds = seconds
        self.backoff = backoff
        self.metrics = metrics

    async def __call__(self, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.seconds
        failures = 0
        while True:
            try:
                return await call()
            except StoreUnavailable:
                self.metrics.store_errors.inc()
                failures += 1
                pause = self.backoff.pause(failures)
                if time.monotonic() + pause > deadline:
                    raise
                log.warning(
                    "database unreachable; retrying in %.2fs",
                    pause,
                    extra={"event": "store_unavailable"},
                )
                await asyncio.sleep(pause)


class PatientDurableStore:
    """A ``DurableStore`` whose every call is retried through a database outage, as a claim or
    a final write is: a handler's step is not failed (an attempt used) by a blip. Each call may
    be repeated safely: a step or a signal recorded before a lost answer comes back as it was
    recorded; a sleep that committed before its answer was lost finds the lease given up
    (``LEASE_GONE``), and the job asleep."""

    def __init__(self, store: DurableStore, patiently: Patience) -> None:
        self.store = store
        self.patiently = patiently

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        return await self.patiently(lambda: self.store.record_step(fence, name, value))

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        return await self.patiently(
            lambda: self.store.sleep(fence, name, seconds=seconds, until=until)
        )

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        return await self.patiently(
            lambda: self.store.wait_for_signal(fence, name, signal, timeout_seconds)
        )

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        return await self.patiently(lambda: self.store.child(fence, name, request, wait=wait))


if TYPE_CHECKING:  # it is a whole DurableStore
    _port: DurableStore = PatientDurableStore(cast(DurableStore, None), cast(Patience, None))
